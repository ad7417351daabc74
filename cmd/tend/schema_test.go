package main

import (
	"encoding/json"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The CLI's own JSON (status, fsck) has exactly the fields its schema
// says; the records' and the history's are checked in tracker.
func TestCLISchemasMatchTheCode(t *testing.T) {
	for _, tt := range []struct {
		schema string
		v      any
	}{
		{"status", status{}},
		{"fsck", fsckReport{}},
	} {
		b, err := os.ReadFile("../../docs/schema/" + tt.schema + ".schema.json")
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Properties map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s.schema.json: %v", tt.schema, err)
		}
		var want []string
		typ := reflect.TypeOf(tt.v)
		for i := range typ.NumField() {
			if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
				want = append(want, name)
			}
		}
		slices.Sort(want)
		if got := slices.Sorted(maps.Keys(s.Properties)); !slices.Equal(got, want) {
			t.Errorf("%s: the schema has %v, the code writes %v", tt.schema, got, want)
		}
	}
}
