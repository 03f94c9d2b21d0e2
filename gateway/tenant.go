package gateway

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxTenantLength is the longest tenant ID, in bytes: the pusher's TSDB
// backend makes each tenant a directory and refuses longer names.
const MaxTenantLength = 150

// ErrInvalidTenant is wrapped by every error ValidateTenant returns.
var ErrInvalidTenant = errors.New("invalid tenant ID")

// ValidateTenant is the gateway's one tenant-ID rule, until one rule for
// every entry point of Ferry exists: what an HTTP header can carry and the
// pusher's TSDB backend can name a directory after. That is non-empty, at
// most MaxTenantLength bytes of UTF-8 without control characters, white
// space or path separators, and neither "." nor "..".
func ValidateTenant(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrInvalidTenant)
	case len(id) > MaxTenantLength:
		return fmt.Errorf("%w: %d bytes, at most %d allowed", ErrInvalidTenant, len(id), MaxTenantLength)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidTenant)
	case id == "." || id == "..":
		return fmt.Errorf("%w: %q is not a directory name", ErrInvalidTenant, id)
	}
	for _, r := range id {
		if unicode.IsControl(r) || unicode.IsSpace(r) || r == '/' || r == '\\' {
			return fmt.Errorf("%w: %q contains a control character, white space or a path separator", ErrInvalidTenant, id)
		}
	}
	return nil
}
