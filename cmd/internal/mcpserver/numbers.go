package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK reads a tool's arguments as float64 before it decodes them into
// the tool's input, and a float64 holds every integer exactly only below
// 2^53: an offset of 9007199254740993 would reach the tool as
// 9007199254740992, and 4.0000000000000001 as 4, with nothing to tell.
// So the arguments are checked first (exactNumbers), as they were sent:
// a number the tool would not get exactly is a tool error naming it. No
// argument of a tool means a number as large as 2^53 (offsets and sizes
// are bytes of a file, durations at most a year).

// maxExact bounds the magnitude of a number in a tool's arguments.
const maxExact = 1 << 53

// exactNumbers returns the server's middleware that answers a call of one
// of tools whose arguments hold a number the tool would not get exactly
// with a tool error; every other call goes on to next (a call of no tool
// is the SDK's to refuse, as one).
func exactNumbers(tools []string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && method == "tools/call" && slices.Contains(tools, p.Name) {
				if err := checkNumbers(p.Arguments); err != nil {
					return toolError(p.Name + ": " + err.Error()), nil
				}
			}
			return next(ctx, method, req)
		}
	}
}

// plainName reports whether s is a name a tool may have (lower-case
// letters and '_'), and so may be quoted in an error as it is. Any other
// name is no tool's: the SDK says so.
func plainName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || c == '_') {
			return false
		}
	}
	return true
}

// checkNumbers returns an error naming the first argument of args (a
// JSON object, as sent) that holds a number that is not read exactly:
// one of magnitude 2^53 or more, or one a float64 rounds to a whole
// number it is not. Arguments that are no JSON are left to the SDK,
// which says what is wrong with them.
func checkNumbers(args json.RawMessage) error {
	if len(args) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	return checkValue("", v)
}

// checkValue checks the numbers in v, found at path of the arguments.
func checkValue(path string, v any) error {
	switch v := v.(type) {
	case json.Number:
		return checkNumber(path, string(v))
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if err := checkValue(joinPath(path, k), v[k]); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := checkValue(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkNumber returns an error naming path if the JSON number lit is not
// read exactly.
func checkNumber(path, lit string) error {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.Abs(f) >= maxExact {
		return fmt.Errorf("%s: %s is too large: a number is read exactly only if its magnitude is below 2^53 (9007199254740992)", path, shorten(lit))
	}
	if f == math.Trunc(f) && !denotes(lit, f) {
		return fmt.Errorf("%s: %s would be read as %s: write the number itself, or with fewer digits", path, shorten(lit), strconv.FormatFloat(f, 'f', -1, 64))
	}
	return nil
}

// denotes reports whether the JSON number lit is exactly the whole
// number f, of magnitude below 2^53. It works on the digits, not on a
// big number: lit may be 16 MiB of them, or have an exponent of 10^9.
func denotes(lit string, f float64) bool {
	mant, exp := strings.TrimPrefix(lit, "-"), ""
	if i := strings.IndexAny(mant, "eE"); i >= 0 {
		mant, exp = mant[:i], mant[i+1:]
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return f == 0 // zero, whatever its exponent
	}
	e := 0
	if exp != "" {
		var err error
		if e, err = strconv.Atoi(exp); err != nil || e < -400 || e > 400 {
			return false // beyond every float64 but 0 and infinity
		}
	}
	// The value is 0.digits × 10^point.
	point := len(digits) + e - len(frac)
	if point <= 0 || point > 16 {
		return false // a fraction; or 10^16 or more, above 2^53
	}
	if point < len(digits) && strings.TrimRight(digits[point:], "0") != "" {
		return false // a fraction past the point
	}
	n := digits[:min(point, len(digits))] + strings.Repeat("0", max(0, point-len(digits)))
	return n == strconv.FormatFloat(math.Abs(f), 'f', -1, 64)
}

// joinPath returns the path of key k of the object at path: path.k, with
// k quoted unless it is a plain name.
func joinPath(path, k string) string {
	if !plainName(k) {
		k = strconv.Quote(k)
	}
	if path == "" {
		return k
	}
	return path + "." + k
}

// shorten returns a number as an error quotes it: at most 40 bytes.
func shorten(lit string) string {
	if len(lit) <= 40 {
		return lit
	}
	return fmt.Sprintf("%s... (%d bytes)", lit[:24], len(lit))
}
