// Package tenant holds the one rule for tenant IDs that every entry point
// applies: the Kafka record key (the consumer's check), the tenant of a
// Push or PushOne request (the pusher), the X-Scope-OrgID header of a query
// (the query API) and, later, the gateway's header.
//
// A tenant ID is 1 to 150 bytes of printable ASCII other than space, and
// neither "/" nor "\", and not "." or "..". It is what an HTTP header value
// carries unchanged (HTTP trims surrounding whitespace and refuses control
// characters, so an ID with them could be written but never queried), and
// what names a directory on every file system (the TSDB backend keeps one
// per tenant). Mimir's documented rule is narrower (letters, digits and
// !-_.*'()); every ID it allows is allowed here.
package tenant

import (
	"errors"
	"fmt"
)

// MaxLength is the longest tenant ID, in bytes.
const MaxLength = 150

// ErrInvalid is wrapped by every error of Validate.
var ErrInvalid = errors.New("invalid tenant ID")

// Validate reports why id is not a valid tenant ID, or nil. The error
// quotes at most the start of a long ID.
func Validate(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrInvalid)
	case len(id) > MaxLength:
		return fmt.Errorf("%w: %d bytes, at most %d allowed", ErrInvalid, len(id), MaxLength)
	case id == "." || id == "..":
		return fmt.Errorf("%w: %q names a directory", ErrInvalid, id)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == '/' || c == '\\' {
			return fmt.Errorf("%w: %q has byte %#02x at %d: only printable ASCII other than space, / and \\ is allowed", ErrInvalid, id, c, i)
		}
	}
	return nil
}
