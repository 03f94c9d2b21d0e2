package tenant

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		id   string
		ok   bool
	}{
		{"should accept a plain ID", "tenant-1", true},
		{"should accept every character Mimir allows", "aZ09!-_.*'()", true},
		{"should accept other printable ASCII", "team|a:b@c=d#e,f~g", true},
		{"should accept 150 bytes", strings.Repeat("a", 150), true},
		{"should refuse an empty ID", "", false},
		{"should refuse 151 bytes", strings.Repeat("a", 151), false},
		{"should refuse .", ".", false},
		{"should refuse ..", "..", false},
		{"should refuse a slash", "a/b", false},
		{"should refuse a backslash", `a\b`, false},
		{"should refuse a space", "a b", false},
		{"should refuse leading whitespace, which HTTP trims", " a", false},
		{"should refuse a tab", "a\tb", false},
		{"should refuse a newline", "a\n", false},
		{"should refuse NUL", "a\x00", false},
		{"should refuse DEL", "a\x7f", false},
		{"should refuse non-ASCII", "tenant-é", false},
		{"should refuse invalid UTF-8", "a\xff", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Validate(tc.id)
			if (err == nil) != tc.ok {
				t.Fatalf("Validate(%q) = %v, want ok=%v", tc.id, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}
