package tracker

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// A record's sum (see State.Sum) tells a hand edit from tend's writing,
// but anyone can compute it again: an agent "fixing" a record, or a user
// who may write a run's directory, could make a record that names any
// process. So the watcher also seals each record with a key that only its
// user can read, and acts (adopts, signals, restarts, deletes, answers) only
// on records whose seal it can verify.

// keySize is the length of a key in bytes.
const keySize = 32

// ErrUnsealed means a record's seal does not verify with the root's key:
// tend did not write it, or wrote it under another key.
var ErrUnsealed = errors.New("its seal does not verify")

// LoadKey returns the key of the root at root, readable only by this
// process's user. If create is set and there is none, it makes one (durable
// before it returns) and reports that it did: the root's records were
// written by a tend that did not seal them (see SealAll).
func LoadKey(root string, create bool) (key []byte, created bool, err error) {
	path := layout.Root(root).RecordKey()
	key, err = readKey(path)
	if !create || !errors.Is(err, os.ErrNotExist) {
		return key, false, err
	}
	key = make([]byte, keySize)
	rand.Read(key)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) { // made meanwhile, by another
		key, err = readKey(path)
		return key, false, err
	}
	if err != nil {
		return nil, false, &os.PathError{Op: "create", Path: path, Err: err}
	}
	err = durable.WriteAll(fd, key)
	if err == nil {
		err = durable.FlushKey.Fsync(fd)
	}
	unix.Close(fd)
	if err == nil {
		err = durable.FlushKeyDir.SyncDir(root)
	}
	if err != nil {
		unix.Unlink(path)
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	return key, true, nil
}

// readKey reads a key, which must be a regular file of keySize bytes,
// owned by this process's user and readable by nobody else.
func readKey(path string) ([]byte, error) {
	b, st, err := durable.ReadRegular(path, keySize)
	switch {
	case err != nil:
		return nil, err
	case int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("%s: owned by uid %d, not by this user (uid %d)", path, st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return nil, fmt.Errorf("%s: readable by others (mode %04o): a key must be the watcher's user's alone", path, st.Mode&0o7777)
	case len(b) != keySize:
		return nil, fmt.Errorf("%s: %d bytes, not %d", path, len(b), keySize)
	}
	return b, nil
}

// sealOf returns the seal of the compact JSON c of a record whose seal
// and sum are empty.
func sealOf(key, c []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(c)
	return hex.EncodeToString(m.Sum(nil)[:12])
}

// sealed reports whether st's seal verifies with key.
func (st *State) sealed(key []byte) bool {
	c := *st
	c.Seal, c.Sum = "", ""
	b, err := json.Marshal(&c)
	return err == nil && st.Seal != "" && hmac.Equal([]byte(st.Seal), []byte(sealOf(key, b)))
}

// CheckSeal returns an error satisfying errors.Is(err, ErrUnsealed) if
// st's seal does not verify with key: for a reader that may read the
// root's key (its watcher's user), which is told a record tend did not
// write from one it did, as the watcher itself does.
func (st *State) CheckSeal(key []byte) error {
	if st.sealed(key) {
		return nil
	}
	return fmt.Errorf("run %s: %w: this root's watcher did not write it (edited, or put there by whoever may write its directory); see tend fsck", st.ID, ErrUnsealed)
}

// SealAll seals every record of s that has no seal, as it is: what a
// watcher does once, when it makes the key of a root whose records an
// earlier tend wrote. Records that do not parse, whose sum does not match,
// or that are not this user's (only a shared root's runs of other users
// are, and a user may have written them) are left for fsck. It returns
// the IDs of those it sealed.
func (s *Store) SealAll() ([]string, []error) {
	dir, ids, err := s.openRuns()
	if err != nil {
		return nil, []error{err}
	}
	if dir != nil {
		dir.Close()
	}
	var sealed []string
	var errs []error
	for _, id := range ids {
		b, fi, err := durable.ReadRegular(s.Run(id).State(), maxRecord)
		if err != nil || int(fi.Uid) != os.Geteuid() {
			continue // another user's record is theirs to forge: never trusted once
		}
		st, err := ParseState(s.Run(id).State(), b)
		if err != nil || st.Seal != "" {
			continue
		}
		if err := s.Write(st); err != nil {
			errs = append(errs, err)
			continue
		}
		sealed = append(sealed, id)
	}
	return sealed, errs
}
