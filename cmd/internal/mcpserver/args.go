package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK checks a tool's arguments against its input schema, and says
// what is wrong in the schema's words, without the tool's name:
// `validating "arguments": validating root: validating /properties/id:
// type: <invalid reflect.Value> has type "null", want "string"`. An agent
// that wrote {"id": null} must read which argument is wrong and how to
// write it. So the arguments are checked first (checkArgs), against the
// same schemas, each error naming the tool and the argument.
//
// An optional argument given as null is taken as left out: agents fill
// every argument of a schema, with null for those they mean to leave to
// their default. A required one (an ID) is never taken as left out: a
// null ID is an error, never "every run".

// checkArgs returns the server's middleware that answers a call of a tool
// in schemas (each tool's input schema) whose arguments do not fit the
// schema with a tool error naming the argument; it drops the optional
// arguments given as null; every other call goes on to next unchanged.
func checkArgs(schemas map[string]*jsonschema.Schema) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			p, ok := req.GetParams().(*mcp.CallToolParamsRaw)
			if !ok || method != "tools/call" || schemas[p.Name] == nil {
				return next(ctx, method, req)
			}
			args, err := fitArgs(schemas[p.Name], p.Arguments)
			if err != nil {
				return toolError(p.Name + ": " + err.Error()), nil
			}
			p.Arguments = args
			return next(ctx, method, req)
		}
	}
}

// fitArgs returns args (a JSON object, as sent) without the optional
// arguments given as null, or an error naming the first argument that
// does not fit schema. Arguments that are no JSON are left to the SDK,
// which says so.
func fitArgs(schema *jsonschema.Schema, args json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}") // none: as an empty object, so a required one is missed by name
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return args, nil
	}
	if v == nil {
		v = map[string]any{}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the arguments are %s: want an object of named arguments (%s)", describe(v), strings.Join(propNames(schema), ", "))
	}
	dropped, err := fitObject("", schema, obj)
	if err != nil {
		return nil, err
	}
	if !dropped {
		return args, nil
	}
	return json.Marshal(obj) // json.Number keeps each number as it was written
}

// fitObject checks obj, the object at path, against s; it deletes from
// obj the optional members that are null where s does not take null, and
// reports whether it did.
func fitObject(path string, s *jsonschema.Schema, obj map[string]any) (dropped bool, err error) {
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		ps, known := s.Properties[k]
		if !known {
			ps = s.AdditionalProperties
		}
		if !known && closed(ps) {
			return false, fmt.Errorf("%sunknown argument %q: the arguments are %s", prefix(path), k, strings.Join(propNames(s), ", "))
		}
		if obj[k] == nil && known && !slices.Contains(s.Required, k) && !takes(ps, "null") {
			delete(obj, k)
			dropped = true
			continue
		}
		d, err := fitValue(joinPath(path, k), ps, obj[k])
		if err != nil {
			return false, err
		}
		dropped = dropped || d
	}
	for _, k := range s.Required {
		if _, ok := obj[k]; !ok {
			return false, fmt.Errorf("missing argument %s (%s)", joinPath(path, k), want(s.Properties[k]))
		}
	}
	return dropped, nil
}

// fitValue checks v, the value at path, against s (nil: anything).
func fitValue(path string, s *jsonschema.Schema, v any) (dropped bool, err error) {
	if s == nil {
		return false, nil
	}
	if t := typeOf(v); !takes(s, t) && !(t == "number" && takes(s, "integer") && whole(v)) {
		if t == "string" && (takes(s, "integer") || takes(s, "number")) {
			return false, fmt.Errorf("%s: %s: want %s, as a JSON number (not in quotes)", path, describe(v), want(s))
		}
		return false, fmt.Errorf("%s: %s: want %s", path, describe(v), want(s))
	}
	switch v := v.(type) {
	case map[string]any:
		return fitObject(path, s, v)
	case []any:
		for i, e := range v {
			d, err := fitValue(fmt.Sprintf("%s[%d]", path, i), s.Items, e)
			if err != nil {
				return false, err
			}
			dropped = dropped || d
		}
	}
	return dropped, nil
}

// closed reports whether an object's additionalProperties schema takes
// no member: jsonschema's false, {"not": {}}.
func closed(s *jsonschema.Schema) bool {
	return s != nil && s.Not != nil && takesAll(s.Not)
}

// takesAll reports whether s is the schema that takes every value: {}.
func takesAll(s *jsonschema.Schema) bool {
	b, err := json.Marshal(s)
	return err == nil && (string(b) == "{}" || string(b) == "true")
}

// types returns the JSON types s takes; none is any.
func types(s *jsonschema.Schema) []string {
	if s.Type != "" {
		return []string{s.Type}
	}
	return s.Types
}

// takes reports whether s takes a value of JSON type t.
func takes(s *jsonschema.Schema, t string) bool {
	ts := types(s)
	return len(ts) == 0 || slices.Contains(ts, t) || t == "integer" && slices.Contains(ts, "number")
}

// want says what s takes, for an error: "a string", "a string or a number".
func want(s *jsonschema.Schema) string {
	var ws []string
	for _, t := range types(s) {
		switch t {
		case "null":
			continue // null is taken as left out, and not what to write
		case "integer":
			ws = append(ws, "an integer")
		case "array":
			w := "an array"
			if s.Items != nil && len(types(s.Items)) > 0 {
				w += " of " + strings.TrimPrefix(strings.TrimPrefix(want(s.Items), "an "), "a ") + "s"
			}
			ws = append(ws, w)
		case "object":
			ws = append(ws, "an object")
		default:
			ws = append(ws, "a "+t)
		}
	}
	if len(ws) == 0 {
		return "any value"
	}
	return strings.Join(ws, " or ")
}

// typeOf returns the JSON type of v as decoded with UseNumber: "integer"
// for a number written without a fraction or exponent.
func typeOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if !strings.ContainsAny(string(v), ".eE") {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	}
	return "object"
}

// whole reports whether the number v is a whole number (1.0, 1e3), which
// JSON Schema takes as an integer; exactNumbers checks it is read exactly.
func whole(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	f, err := n.Float64()
	return err == nil && f == float64(int64(f))
}

// describe quotes v for an error: JSON, at most about 40 bytes of it,
// then its type (but for null).
func describe(v any) string {
	b, _ := json.Marshal(v)
	lit := shorten(string(b))
	switch t := typeOf(v); t {
	case "null":
		return "null"
	default:
		return lit + " (" + map[string]string{"boolean": "a boolean", "string": "a string", "integer": "a number", "number": "a number", "array": "an array", "object": "an object"}[t] + ")"
	}
}

// propNames returns the names of s's properties, in order.
func propNames(s *jsonschema.Schema) []string {
	if len(s.PropertyOrder) > 0 {
		return s.PropertyOrder
	}
	return slices.Sorted(maps.Keys(s.Properties))
}

// prefix returns path as an error's prefix: "path: ", or "" at the root.
func prefix(path string) string {
	if path == "" {
		return ""
	}
	return path + ": "
}
