package pusher

import "github.com/ferrylabs/ferry/proto/wire"

// The label rules are wire's (proto/wire/labelrules.go), so that the
// gateway's single-pass check of a request (wire.Decoder.Scan) and Filter
// judge a label by the same code; these names keep Filter's reading short.

// validLabelName reports whether s is a label name: [a-zA-Z_][a-zA-Z0-9_]*.
func validLabelName(s string) bool { return wire.ValidLabelName(s) }

// validMetricName reports whether s is a metric name: [a-zA-Z_:][a-zA-Z0-9_:]*.
func validMetricName(s string) bool { return wire.ValidMetricName(s) }

// validUTF8 reports whether s is valid UTF-8.
func validUTF8(s string) bool { return wire.ValidUTF8(s) }
