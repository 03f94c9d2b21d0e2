package consumer

// ValidateWriteRequest exports validateWriteRequest for the gateway, which
// must refuse what the consumer would skip as undecodable. It is temporary:
// the check is moving to its own package, and the gateway's one call will
// point there.
func ValidateWriteRequest(b []byte) error { return validateWriteRequest(b) }
