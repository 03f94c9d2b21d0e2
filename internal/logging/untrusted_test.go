package logging

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestUntrusted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     string
	}{
		{"should keep a short string", "tenant-1", "tenant-1"},
		{"should keep a string of exactly the bound", strings.Repeat("a", MaxUntrusted), strings.Repeat("a", MaxUntrusted)},
		{"should cut a long string and give its length", strings.Repeat("a", 1<<20), strings.Repeat("a", MaxUntrusted) + "…(1048576 bytes)"},
		{"should cut at a rune boundary", strings.Repeat("a", MaxUntrusted-1) + "é" + "b", strings.Repeat("a", MaxUntrusted-1) + "…(258 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Untrusted(tc.in)
			if got != tc.want {
				t.Errorf("Untrusted = %q, want %q", got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("Untrusted made invalid UTF-8: %q", got)
			}
		})
	}
}
