package spool

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// A client checks the one request it writes with ParseStart, and
// encoding/json's first use in a process costs about 0.2 ms there (its
// decoder's state, the struct's fields read by reflection): more than the
// rest of what tend start does besides waiting. The requests that tend's
// clients write (Start.MarshalJSON) are decoded here with jsontext
// instead, in a tenth of that. Anything else these decoders report false
// for, and encoding/json decodes it (or says what is wrong): they accept
// only what it accepts, and give what it gives (TestFastJSONIsV1s,
// FuzzFastJSONIsV1s).

// fastStartJSON decodes body into j as decodeStrict does, for a body whose
// members are named exactly as MarshalJSON names them, each once, none
// null, with nothing after the object.
func fastStartJSON(body []byte, j *startJSON) bool {
	d := jsontext.NewDecoder(bytes.NewReader(body))
	if t, err := d.ReadToken(); err != nil || t.Kind() != '{' {
		return false
	}
	for d.PeekKind() != '}' {
		name, err := d.ReadToken()
		if err != nil || !fastMember(d, name.String(), j) {
			return false
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return false
	}
	_, err := d.ReadToken()
	return err == io.EOF
}

// fastMember decodes the value of member name into j.
func fastMember(d *jsontext.Decoder, name string, j *startJSON) bool {
	if p := rawMember(name, j); p != nil {
		if d.PeekKind() == 'n' {
			return false
		}
		v, err := d.ReadValue()
		*p = bytes.Clone(v)
		return err == nil
	}
	switch name {
	case "cwd":
		return fastString(d, &j.Cwd)
	case "session":
		return fastString(d, &j.Session)
	case "env":
		return fastStringMap(d, &j.Env)
	case "labels":
		return fastStringMap(d, &j.Labels)
	case "ready_file":
		t, err := d.ReadToken()
		if err != nil || t.Kind() != 't' && t.Kind() != 'f' {
			return false
		}
		j.ReadyFile = t.Bool()
		return true
	case "output_limit":
		t, err := d.ReadToken()
		if err != nil || t.Kind() != '0' || strings.ContainsAny(t.String(), ".eE") {
			return false
		}
		j.OutputLimit, err = t.Int()
		return err == nil
	}
	return false // unknown, or not named as MarshalJSON names it
}

// rawMember returns the field of j that keeps member name's value as it
// is written, or nil.
func rawMember(name string, j *startJSON) *json.RawMessage {
	switch name {
	case "command":
		return &j.Command
	case "timeout":
		return &j.Timeout
	case "grace":
		return &j.Grace
	case "restart":
		return &j.Restart
	case "health":
		return &j.Health
	case "limits":
		return &j.Limits
	case "after":
		return &j.After
	case "not_before":
		return &j.NotBefore
	case "slurm":
		return &j.Slurm
	}
	return nil
}

func fastString(d *jsontext.Decoder, s *string) bool {
	t, err := d.ReadToken()
	if err != nil || t.Kind() != '"' {
		return false
	}
	*s = t.String()
	return true
}

// fastStringMap decodes an object of strings into a new map, as
// encoding/json does into a nil one.
func fastStringMap(d *jsontext.Decoder, m *map[string]string) bool {
	if t, err := d.ReadToken(); err != nil || t.Kind() != '{' {
		return false
	}
	*m = make(map[string]string)
	for d.PeekKind() != '}' {
		var k, v string
		if !fastString(d, &k) || !fastString(d, &v) {
			return false
		}
		(*m)[k] = v
	}
	_, err := d.ReadToken()
	return err == nil
}

// fastCommand decodes a command's value, a string or an array of strings,
// as setCommand does with encoding/json.
func fastCommand(raw []byte) (shell string, argv []string, ok bool) {
	if len(raw) == 0 {
		return "", nil, false
	}
	d := jsontext.NewDecoder(bytes.NewReader(raw))
	if raw[0] == '"' {
		ok = fastString(d, &shell)
	} else if t, err := d.ReadToken(); err == nil && t.Kind() == '[' {
		argv = []string{}
		for ok = true; ok && d.PeekKind() != ']'; {
			var a string
			ok = fastString(d, &a)
			argv = append(argv, a)
		}
		_, err = d.ReadToken()
		ok = ok && err == nil
	}
	if _, err := d.ReadToken(); !ok || err != io.EOF {
		return "", nil, false
	}
	return shell, argv, true
}
