package spool

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The fast decoders accept only what encoding/json accepts and give what
// it gives; and they take every request MarshalJSON writes, or a client
// would pay encoding/json's first use after all.
func TestFastJSONIsV1s(t *testing.T) {
	bodies := []string{
		`{"command":"x"}`,
		`{ "command" : [ "a" , "b" ] , "restart" : { "policy" : "always" } , "env" : { } }`,
		"{\"command\":\"x\",\n\t\"labels\":{\"k\":\"v\"},\"ready_file\":true,\"output_limit\":65536}",
		`{"command":"a\/b \u00e9 \ud83d\ude42 \n \u0000"}`,
		`{"command":"x","ready_file":false,"output_limit":-0,"timeout":"1s","grace":"0s"}`,
		`{"command":"x","after":["a","b:ended"],"not_before":"10m","slurm":false}`,
		`{"Command":"x"}`,               // another case: encoding/json takes it
		`{"command":"x","command":"y"}`, // twice: encoding/json takes the last
		`{"command":"x","env":{"A":"1","A":"2"}}`,
		`{"command":"x","env":{"A":"1"},"env":{"B":"2"}}`, // encoding/json merges them
		`{"command":null}`,
		`{"command":"x","cwd":null}`,
		`{"command":"x","env":{"A":null}}`,
		`{"command":"x","env":{"A":1}}`,
		`{"command":"\ud800"}`, // half a pair: encoding/json reads U+FFFD
		`{"command":"x"} {}`,
		`{"command":"x",}`,
		`{"command":"x","output_limit":1e6}`,
		`{"command":"x","output_limit":65536.0}`,
		`{"command":"x","output_limit":99999999999999999999}`,
		`{"command":"x","ready_file":"true"}`,
		`{"command":"x","extra":1}`,
		`{"command":["a",null]}`,
		`{"command":["a",1]}`,
		`{"command":[]}`,
		`{"command":7}`,
		`{}`, `[]`, `"x"`, `{"command":"x"`, ``,
	}
	taken := make(map[string]bool)
	for _, s := range startCorpus() {
		if b, err := s.MarshalJSON(); err == nil {
			bodies = append(bodies, string(b))
			taken[string(b)] = true
		}
	}
	for _, body := range bodies {
		var want, got startJSON
		wantErr := decodeStrict([]byte(body), &want)
		ok := fastStartJSON([]byte(body), &got)
		switch {
		case ok && wantErr != nil:
			t.Fatalf("%s: taken fast, but encoding/json refuses it: %v", body, wantErr)
		case ok && !reflect.DeepEqual(got, want):
			t.Fatalf("%s:\n fast %+v\n want %+v", body, got, want)
		case !ok && taken[body]:
			t.Fatalf("%s: written by MarshalJSON, but not taken fast", body)
		}
		if ok && len(want.Command) > 0 {
			checkFastCommand(t, want.Command, taken[body])
		}
	}
	for _, raw := range []string{`"x"`, `["a","b"]`, `[]`, `["a",null]`, `["a",1]`, `"\ud800"`, `7`, `"a" "b"`, `["a"`, `{"a":1}`} {
		checkFastCommand(t, json.RawMessage(raw), false)
	}
}

// checkFastCommand checks fastCommand against encoding/json on a
// command's value; mustTake says it must be taken fast.
func checkFastCommand(t *testing.T, raw json.RawMessage, mustTake bool) {
	t.Helper()
	shell, argv, ok := fastCommand(raw)
	var wantShell string
	var wantArgv []string
	var err error
	if strings.HasPrefix(string(raw), `"`) {
		err = json.Unmarshal(raw, &wantShell)
	} else {
		err = json.Unmarshal(raw, &wantArgv)
	}
	switch {
	case ok && err != nil:
		t.Fatalf("command %s: taken fast, but encoding/json refuses it: %v", raw, err)
	case ok && (shell != wantShell || !reflect.DeepEqual(argv, wantArgv)):
		t.Fatalf("command %s: fast %q %q, want %q %q", raw, shell, argv, wantShell, wantArgv)
	case !ok && mustTake:
		t.Fatalf("command %s: written by MarshalJSON, but not taken fast", raw)
	}
}

// FuzzFastJSONIsV1s: whatever the body, the fast decoders take only what
// encoding/json takes, and give what it gives.
func FuzzFastJSONIsV1s(f *testing.F) {
	for _, s := range startCorpus()[:40] {
		if b, err := s.MarshalJSON(); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{ "command" : [ "a" , null ], "env": {"A": "1", "A": "2"}, "restart": {"policy": "always"} }`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var want, got startJSON
		wantErr := decodeStrict(body, &want)
		if fastStartJSON(body, &got) {
			if wantErr != nil {
				t.Fatalf("%q: taken fast, but encoding/json refuses it: %v", body, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q:\n fast %+v\n want %+v", body, got, want)
			}
		}
		if invalidUTF8(body) < 0 {
			checkFastCommand(t, body, false)
		}
	})
}
