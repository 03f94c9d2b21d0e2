package logging

import (
	"strconv"
	"unicode/utf8"
)

// MaxUntrusted is the most bytes of an untrusted string that Untrusted
// keeps.
const MaxUntrusted = 256

// Untrusted shortens a string that came from outside (a Kafka key, a
// tenant header, a reason quoting a request) for a log line or a metric
// label: a hostile 1 MB key must not become a 1 MB log line. Longer
// strings keep their first MaxUntrusted bytes, cut at a rune boundary, and
// say how long they were.
func Untrusted(s string) string {
	if len(s) <= MaxUntrusted {
		return s
	}
	cut := MaxUntrusted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
