package tracker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/tendhq/tend/spool"
	"golang.org/x/sys/unix"
)

// Head is the part of a run's record that says where the run stands,
// enough for a client that has just started a run to tell one that runs
// from one that failed to start (Failed, with no PID).
type Head struct {
	ID     string
	State  StateName
	Rev    int64
	PID    int
	Reason string
}

// HeadOf returns st's Head.
func HeadOf(st *State) Head {
	return Head{ID: st.ID, State: st.State, Rev: st.Rev, PID: st.PID, Reason: st.Reason}
}

// ReadHead returns the Head of run id's record. Where the file is byte
// for byte what tend writes (its sum matches) and the Store has no key,
// it decodes only those members, the sum and the object's syntax: in a
// process that has decoded no record, a tenth of decoding it all. It
// does not check the other members: a file edited so that only they are
// invalid, its sum made again (anyone can), gives a Head where Read
// gives an error. So it is for a client that acts on nothing in the
// record, as tend start, which reads what its watcher has just written to
// tell a run that failed to start; anything else is decoded and checked
// by Read, whose errors it returns.
func (s *Store) ReadHead(id string) (Head, error) {
	if err := spool.ValidID(id); err != nil {
		return Head{}, fmt.Errorf("run %q: %w: %v", id, ErrNotFound, err)
	}
	b, err := readSmall(unix.AT_FDCWD, s.Run(id).State(), s.Run(id).State(), make([]byte, smallRecord), nil)
	if errors.Is(err, os.ErrNotExist) {
		return Head{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err == nil && s.key == nil {
		if h, sum, ok := parseHead(b); ok && h.ID != "" && h.State != "" && h.Rev >= 1 && fileSumMatches(b, sum) {
			return h, nil
		}
	}
	st, err := s.Read(id)
	if st == nil {
		return Head{}, err
	}
	return HeadOf(st), err
}

// parseHead decodes a record's Head members and its sum, skipping the
// rest. Like ParseState's decoder, it refuses a member named twice and
// bytes that are not UTF-8; ok is false for anything it cannot decode.
func parseHead(b []byte) (h Head, sum string, ok bool) {
	d := jsontext.NewDecoder(bytes.NewReader(b))
	if t, err := d.ReadToken(); err != nil || t.Kind() != '{' {
		return h, "", false
	}
	var pid int64
	for d.PeekKind() != '}' {
		name, err := d.ReadToken()
		if err != nil {
			return h, "", false
		}
		var str *string
		var num *int64
		switch name.String() {
		case "id":
			str = &h.ID
		case "state":
			str = (*string)(&h.State)
		case "reason":
			str = &h.Reason
		case "sum":
			str = &sum
		case "rev":
			num = &h.Rev
		case "pid":
			num = &pid
		default:
			if d.SkipValue() != nil {
				return h, "", false
			}
			continue
		}
		v, err := d.ReadToken()
		switch {
		case err != nil:
			return h, "", false
		case str != nil && v.Kind() == '"':
			*str = v.String()
		case num != nil && v.Kind() == '0' && !strings.ContainsAny(v.String(), ".eE"):
			if *num, err = v.Int(); err != nil {
				return h, "", false
			}
		default:
			return h, "", false
		}
	}
	h.PID = int(pid)
	if _, err := d.ReadToken(); err != nil {
		return h, "", false
	}
	_, err := d.ReadToken()
	return h, sum, err == io.EOF
}
