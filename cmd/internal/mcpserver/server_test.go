package mcpserver

import "testing"

func TestInvalidUTF8(t *testing.T) {
	tests := []struct {
		s    string
		want int64
	}{
		{"", 0}, {"hello\n", 0}, {"é日本\U0001F600", 0},
		{"\xff", 1}, {"a\xff\xfeb", 2}, {"\xc3", 1}, {"\xc3(", 1},
		{"\xe6\x97", 2},     // a character cut short: each byte is U+FFFD
		{"\xed\xa0\x80", 3}, // a surrogate is no UTF-8
		{"\xc0\xaf", 2},     // nor an overlong '/'
	}
	for _, tt := range tests {
		if got := invalidUTF8(tt.s); got != tt.want {
			t.Errorf("invalidUTF8(%q) = %d, want %d", tt.s, got, tt.want)
		}
	}
}
