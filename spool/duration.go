package spool

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Duration is a length of time in a request or a state file. In JSON it is
// written as a Go duration string ("1m30s") and read from either such a
// string or a number of seconds (90, 0.5).
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string or a number of seconds. Negative
// values and values beyond a year are errors: they are always mistakes.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if s, ok := plainString(b); ok {
		v = s // the usual case: every record has a grace, read thousands at a time
	} else if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var dur time.Duration
	switch v := v.(type) {
	case string:
		var err error
		if dur, err = time.ParseDuration(v); err != nil {
			return badDuration(v)
		}
	case float64:
		switch {
		case math.IsNaN(v):
			return fmt.Errorf("%v is not a number of seconds", v)
		case v < -maxDuration.Seconds():
			return fmt.Errorf("%s seconds is negative", seconds(v))
		case v > maxDuration.Seconds():
			// Said as a string's is: "out of range" named no range.
			return fmt.Errorf("%s seconds is longer than the limit of %s (%s seconds)", seconds(v), maxDuration, seconds(maxDuration.Seconds()))
		}
		dur = time.Duration(v * float64(time.Second))
	default:
		return fmt.Errorf("want a duration such as \"30s\" or a number of seconds, not %s", b)
	}
	if dur < 0 {
		return fmt.Errorf("%s is negative", dur)
	}
	if dur > maxDuration {
		return fmt.Errorf("%s is longer than the limit of %s", dur, maxDuration)
	}
	*d = Duration(dur)
	return nil
}

// seconds writes v as it was likely written: 31536001, not 3.1536001e+07;
// a number too long for that in exponent form.
func seconds(v float64) string {
	if math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// badDuration is the error for string s, which is no Go duration. A
// number in a string ("10") is not read as seconds: "10" may be meant in
// any unit, and a script's "$T" is as likely a count of minutes; the
// error says both forms that are taken.
func badDuration(s string) error {
	if n := strings.TrimSpace(s); decimal(n) && len(n) <= 20 {
		return fmt.Errorf("%q has no unit: write a Go duration such as \"%ss\" or \"%sm\", or a number of seconds as a JSON number (%s, not in quotes)", s, n, n, n)
	}
	return fmt.Errorf("%q is not a duration (try \"30s\", \"5m\" or a number of seconds)", s)
}

// decimal reports whether s is a decimal number: digits, with a sign
// and a point or not.
func decimal(s string) bool {
	s = strings.TrimLeft(s, "+-")
	whole, frac, _ := strings.Cut(s, ".")
	digits := func(s string) bool { return strings.Trim(s, "0123456789") == "" }
	return whole+frac != "" && digits(whole) && digits(frac)
}

// plainString returns the text of JSON string b when it has no escapes
// (and so means its bytes), without a decoder.
func plainString(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	s := b[1 : len(b)-1]
	for _, c := range s {
		if c == '\\' || c == '"' || c < 0x20 || c >= utf8.RuneSelf {
			return "", false
		}
	}
	return string(s), true
}

// maxDuration bounds every duration in a request.
const maxDuration = 365 * 24 * time.Hour

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
