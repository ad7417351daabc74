package spool

import (
	"encoding/json"
	"testing"
	"time"
)

func TestDurationJSON(t *testing.T) {
	tests := []struct {
		json    string
		want    time.Duration
		wantErr string
	}{
		{`"30s"`, 30 * time.Second, ""},
		{`"1m30s"`, 90 * time.Second, ""},
		{`"0s"`, 0, ""},
		{`90`, 90 * time.Second, ""},
		{`0.5`, 500 * time.Millisecond, ""},
		{`"\u0033s"`, 3 * time.Second, ""}, // escaped: decoded, not read as is
		{`"3s\u00e9"`, 0, `"3sé" is not a duration (try "30s", "5m" or a number of seconds)`},
		{`"soon"`, 0, `"soon" is not a duration (try "30s", "5m" or a number of seconds)`},
		{`"10"`, 0, `"10" has no unit: write a Go duration such as "10s" or "10m", or a number of seconds as a JSON number (10, not in quotes)`},
		{`"0.5"`, 0, `"0.5" has no unit: write a Go duration such as "0.5s" or "0.5m", or a number of seconds as a JSON number (0.5, not in quotes)`},
		{`" 90 "`, 0, `" 90 " has no unit: write a Go duration such as "90s" or "90m", or a number of seconds as a JSON number (90, not in quotes)`},
		{`"Inf"`, 0, `"Inf" is not a duration (try "30s", "5m" or a number of seconds)`},
		{`"."`, 0, `"." is not a duration (try "30s", "5m" or a number of seconds)`},
		{`"1.2.3"`, 0, `"1.2.3" is not a duration (try "30s", "5m" or a number of seconds)`},
		{`"-5s"`, 0, "-5s is negative"},
		{`"9000h"`, 0, "9000h0m0s is longer than the limit of 8760h0m0s"},
		{`1e12`, 0, "1000000000000 seconds is longer than the limit of 8760h0m0s (31536000 seconds)"},
		{`31536001`, 0, "31536001 seconds is longer than the limit of 8760h0m0s (31536000 seconds)"},
		{`1e300`, 0, "1e+300 seconds is longer than the limit of 8760h0m0s (31536000 seconds)"},
		{`-1e12`, 0, "-1000000000000 seconds is negative"},
		{`-5`, 0, "-5s is negative"},
		{`true`, 0, `want a duration such as "30s" or a number of seconds, not true`},
	}
	for _, tt := range tests {
		t.Run(tt.json, func(t *testing.T) {
			var got struct {
				D Duration `json:"d"`
			}
			err := json.Unmarshal([]byte(`{"d": `+tt.json+`}`), &got)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.D.D() != tt.want {
				t.Fatalf("got %v, %v; want %v", got.D.D(), err, tt.want)
			}
		})
	}
}
