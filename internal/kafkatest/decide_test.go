package kafkatest

import (
	"strings"
	"testing"
)

// TestDecide is decide's whole table. In particular FERRY_KAFKA_FAKE=1 must
// not win over CI=true: kfake skips the broker-restart tests, so CI would
// pass without them.
func TestDecide(t *testing.T) {
	none := []string(nil)
	noJava := []string{"Java"}
	for _, tc := range []struct {
		name    string
		env     environment
		kind    string
		errLike string // non-empty: decide must fail with this in the message
	}{
		{"address wins", environment{address: "h:9092", wantFake: true, ci: true, missing: noJava}, KindExternal, ""},
		{"address in CI", environment{address: "h:9092", ci: true}, KindExternal, ""},
		{"tools present", environment{missing: none}, KindReal, ""},
		{"tools present in CI", environment{ci: true, missing: none}, KindReal, ""},
		{"fake asked", environment{wantFake: true, missing: none}, KindFake, ""},
		{"fake asked, no tools", environment{wantFake: true, missing: noJava}, KindFake, ""},
		{"no tools", environment{missing: noJava}, KindFake, ""},
		{"fake asked in CI", environment{wantFake: true, ci: true, missing: none}, "", "FERRY_KAFKA_FAKE is set"},
		{"fake asked in CI, no tools", environment{wantFake: true, ci: true, missing: noJava}, "", "refusing to use kfake"},
		{"no tools in CI", environment{ci: true, missing: []string{"Java", "Maven"}}, "", "no Java/Maven on PATH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := decide(tc.env)
			if tc.errLike != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errLike) {
					t.Fatalf("decide = %+v, %v; want an error containing %q", c, err, tc.errLike)
				}
				return
			}
			if err != nil || c.kind != tc.kind {
				t.Fatalf("decide = %+v, %v; want kind %s", c, err, tc.kind)
			}
		})
	}
}
