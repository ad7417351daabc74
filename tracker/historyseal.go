package tracker

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// The history is readable by a shared root's group, but a run's labels
// and notes are its owner's (and root's) alone. A label or note change
// must still be in the history, for a record rebuilt from it to keep them
// (Rebuild). So the watcher writes what such a change set sealed
// (Event.Sealed): encrypted with a key derived from the root's record.key,
// which only the watcher's user may read, and opened only to rebuild a
// record. A reader of the history learns that a change was made, and its
// size, never its values.

// historySealLabel names the key derived from record.key to seal history
// values: a key of its own, so a sealed value and a record's seal (an
// HMAC with record.key itself) never share one.
const historySealLabel = "tend history labels and notes v1"

// ErrNotOpened means an event's sealed change does not open with the key
// given: there is none, the root's key was made anew since, or the line
// was edited or moved to another run's or rev's line.
var ErrNotOpened = errors.New("its sealed labels and note do not open with this root's key")

// sealedChange is what Event.Sealed holds, once opened.
type sealedChange struct {
	Labels map[string]*string `json:"labels,omitempty"`
	Note   string             `json:"note,omitempty"`
}

// historyAEAD returns AES-256-GCM under the history key derived from
// recordKey.
func historyAEAD(recordKey []byte) (cipher.AEAD, error) {
	m := hmac.New(sha256.New, recordKey)
	m.Write([]byte(historySealLabel))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// changeAD is the additional data of ev's sealed value: its run and rev,
// so a sealed value copied to another run's line, or another line of its
// run, does not open there.
func changeAD(ev *Event) []byte {
	return []byte(ev.ID + "\n" + strconv.FormatInt(ev.Rev, 10))
}

// SealChange replaces ev's Labels and Note, if it has any, with Sealed:
// them, encrypted with a key derived from recordKey, with ev's ID and Rev
// (which must be final) bound to them. It fails only without a key; ev
// then carries neither, as a history line never carries them in clear.
func SealChange(recordKey []byte, ev *Event) error {
	if ev.Labels == nil && ev.Note == "" {
		return nil
	}
	plain, err := json.Marshal(sealedChange{ev.Labels, ev.Note})
	ev.Labels, ev.Note = nil, ""
	if err != nil {
		return fmt.Errorf("run %s: sealing its labels and note: %w", ev.ID, err)
	}
	if len(recordKey) == 0 {
		return fmt.Errorf("run %s: its labels and note are left out of the history: no key to seal them with", ev.ID)
	}
	aead, err := historyAEAD(recordKey)
	if err != nil {
		return fmt.Errorf("run %s: sealing its labels and note: %w", ev.ID, err)
	}
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	ev.Sealed = base64.StdEncoding.EncodeToString(aead.Seal(nonce, nonce, plain, changeAD(ev)))
	return nil
}

// OpenChange returns ev with its Sealed value opened into its Labels and
// Note (and Sealed empty), using recordKey. An event without a sealed
// value is returned as it is. If it does not open, ev is returned as it
// is, with an error satisfying errors.Is(err, ErrNotOpened).
func OpenChange(recordKey []byte, ev Event) (Event, error) {
	if ev.Sealed == "" {
		return ev, nil
	}
	ch, err := openChange(recordKey, &ev)
	if err != nil {
		return ev, fmt.Errorf("run %s, rev %d: %w: %v", ev.ID, ev.Rev, ErrNotOpened, err)
	}
	ev.Labels, ev.Note, ev.Sealed = ch.Labels, ch.Note, ""
	return ev, nil
}

func openChange(recordKey []byte, ev *Event) (sealedChange, error) {
	var ch sealedChange
	if len(recordKey) == 0 {
		return ch, errors.New("no key")
	}
	b, err := base64.StdEncoding.DecodeString(ev.Sealed)
	if err != nil {
		return ch, err
	}
	aead, err := historyAEAD(recordKey)
	if err != nil {
		return ch, err
	}
	if len(b) < aead.NonceSize() {
		return ch, errors.New("too short")
	}
	plain, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], changeAD(ev))
	if err != nil {
		return ch, err
	}
	err = json.Unmarshal(plain, &ch)
	return ch, err
}

// SealChange seals ev's labels and note with s's key (see SealChange).
func (s *Store) SealChange(ev *Event) error { return SealChange(s.key, ev) }

// UnopenedChanges counts the events of events (a run's history, as
// Rebuild takes it) whose sealed labels and
// note do not open with s's key: a record Rebuild makes from them lacks
// what they changed.
func UnopenedChanges(s *Store, events []Event) int {
	n := 0
	for _, e := range replayed(events) {
		if _, err := OpenChange(s.key, e); err != nil {
			n++
		}
	}
	return n
}
