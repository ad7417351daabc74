package tracker

import (
	"encoding/json"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tendhq/tend/spool"
)

// The schemas in docs/schema are kept in step with the code: each object
// has exactly the fields of the type that writes it, and each enum the
// values of its one source (States, StopCauses, spool.Verbs,
// spool.Outcomes). Drift fails here, not in a client.
func TestSchemasMatchTheCode(t *testing.T) {
	record := loadSchema(t, "record")["$defs"].(map[string]any)
	rec := record["record"].(map[string]any)
	props := rec["properties"].(map[string]any)
	for _, tt := range []struct {
		name   string
		schema map[string]any
		v      any
	}{
		{"record", props, State{}},
		{"record.stop", props["stop"].(map[string]any)["properties"].(map[string]any), Stop{}},
		{"record.notes", items(props["notes"])["properties"].(map[string]any), Note{}},
		{"record.attempts", items(props["attempts"])["properties"].(map[string]any), Attempt{}},
		{"record.health_status", props["health_status"].(map[string]any)["properties"].(map[string]any), HealthStatus{}},
		{"record.health_status.checks", items(props["health_status"].(map[string]any)["properties"].(map[string]any)["checks"])["properties"].(map[string]any), HealthCheck{}},
		{"record.output", props["output"].(map[string]any)["properties"].(map[string]any), Output{}},
		{"record's stream", record["stream"].(map[string]any)["properties"].(map[string]any), Stream{}},
		{"event", loadSchema(t, "event")["properties"].(map[string]any), Event{}},
	} {
		if got, want := slices.Sorted(maps.Keys(tt.schema)), jsonFields(tt.v); !slices.Equal(got, want) {
			t.Errorf("%s: the schema has %v, the code writes %v", tt.name, got, want)
		}
	}
	enum := func(v any) []string {
		var out []string
		for _, e := range v.(map[string]any)["enum"].([]any) {
			out = append(out, e.(string))
		}
		return out
	}
	strs := func(vs any) []string {
		var out []string
		v := reflect.ValueOf(vs)
		for i := range v.Len() {
			out = append(out, v.Index(i).String())
		}
		return out
	}
	outcome := loadSchema(t, "outcome")["properties"].(map[string]any)
	for _, tt := range []struct {
		name      string
		got, want []string
	}{
		{"record.state", enum(record["state"]), strs(States)},
		{"record.stop.cause", enum(props["stop"].(map[string]any)["properties"].(map[string]any)["cause"]), strs(StopCauses)},
		{"outcome.verb", enum(outcome["verb"]), spool.Verbs[1:]}, // every verb but start has a control outcome
		// what --json prints: every outcome but a start's (accepted), and
		// gc --dry-run's would_delete
		{"outcome.outcome", sorted(enum(outcome["outcome"])), sorted(append(slices.DeleteFunc(slices.Clone(spool.Outcomes), func(o string) bool { return o == spool.Accepted }), "would_delete"))},
	} {
		if !slices.Equal(tt.got, tt.want) {
			t.Errorf("%s: the schema says %v, the code %v", tt.name, tt.got, tt.want)
		}
	}
}

func loadSchema(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../docs/schema/" + name + ".schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s.schema.json: %v", name, err)
	}
	return m
}

func items(v any) map[string]any { return v.(map[string]any)["items"].(map[string]any) }

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

// jsonFields returns the JSON names of the fields of struct v, sorted.
func jsonFields(v any) []string {
	var out []string
	typ := reflect.TypeOf(v)
	for i := range typ.NumField() {
		if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
