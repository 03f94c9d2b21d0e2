package wire

import (
	"errors"
	"fmt"
	"math"

	"github.com/klauspost/compress/snappy"
	"google.golang.org/protobuf/encoding/protowire"
)

// The wire format accepts values no correct producer writes and that cost
// the pusher far more than their size: a 4 MiB request of empty series
// (the bytes 0a 00 repeated) is two million TimeSeries, 740 MB once
// decoded. The rules of this file refuse such values by policy, on top of
// what the generated decoder refuses; every such error wraps ErrRefused.
//
//   - A series without labels is refused, request and all: it cannot be
//     stored, no correct producer writes one (remote-write 1.0 requires
//     __name__), and it is the cheapest element to repeat. A series with
//     labels and no samples, histograms or exemplars is legal (Prometheus
//     accepts it and stores nothing) and costs only its labels: it is
//     accepted.
//   - A remote-write 2.0 request (fields 4 symbols and 5 timeseries, which
//     a 1.0 WriteRequest does not have) would decode as an empty 1.0
//     request and be acknowledged with nothing stored: silent loss.
//   - A snappy-compressed value is a remote-write body as sent over HTTP,
//     not a record value.
//   - Decoder alone: limits on series per request and samples per series,
//     and a bound on the memory a request may take once decoded relative to
//     its encoded size (MaxExpansion).

// ErrRefused is matched (errors.Is) by the errors of values that are
// well-formed protobuf but refused by the rules above.
var ErrRefused = errors.New("refused")

// refusal is an error of the rules above: it says what is wrong, and
// errors.Is matches it with ErrRefused.
type refusal string

func (r refusal) Error() string { return string(r) }

// Is makes every refusal match ErrRefused.
func (refusal) Is(target error) bool { return target == ErrRefused }

var (
	// ErrSeriesWithoutLabels refuses a request with a series that has no
	// labels.
	ErrSeriesWithoutLabels error = refusal("a series without labels")
	// ErrRemoteWrite2 refuses a remote-write 2.0 request.
	ErrRemoteWrite2 error = refusal("remote-write 2.0 request: Ferry's topic carries remote-write 1.0; use the gateway to convert")
	// ErrSnappy refuses a snappy-compressed value.
	ErrSnappy error = refusal("snappy-compressed value: records must be uncompressed remote-write 1.0 protobuf")
	// ErrOverLimit is wrapped by the errors of requests over a Limits.
	ErrOverLimit error = refusal("over a limit")
)

// Limits bound what one request may hold; zero fields are unlimited.
type Limits struct {
	// MaxSeries is the most series a request may have.
	MaxSeries int
	// MaxSamplesPerSeries is the most samples a series may have, and
	// separately the most histograms and the most exemplars.
	MaxSamplesPerSeries int
	// MaxExpansion bounds the bytes a decoded request may take per byte
	// of its encoding (plus expansionSlack); 0 is unbounded.
	MaxExpansion int
	// MaxDecodedBytes, when positive, bounds the bytes a decoded request
	// may take whatever its size: the gateway gives its decoder no more
	// than its memory account can hold.
	MaxDecodedBytes int
}

// DefaultMaxExpansion is the pusher's MaxExpansion. A real request
// decodes to 1-6 bytes per encoded byte (label strings point into the
// encoding; a native histogram with no observations is the worst, about
// 12); hostile shapes (empty series, samples, exemplars, histograms
// repeated) reach 20 to 120.
const DefaultMaxExpansion = 16

// expansionSlack is the decoded size any request may reach, however small.
const expansionSlack = 4 << 10

// MaxDecodedBytes is the most a request of n encoded bytes may take once
// decoded under a MaxExpansion of ratio: ratio bytes per byte, plus a
// little for the smallest requests. Every decoder of every door (this
// package's Decoder, the gateway's remote-write 2.0 decoder) holds a
// request to it, and allocates at most MaxAllocFactor times it.
func MaxDecodedBytes(ratio, n int) int { return ratio*n + expansionSlack }

// Budget is the most a request of n encoded bytes may take once decoded
// under l: MaxDecodedBytes(MaxExpansion, n), and at most l.MaxDecodedBytes
// when that is set; math.MaxInt when nothing bounds it.
func (l Limits) Budget(n int) int {
	budget := math.MaxInt
	if l.MaxExpansion > 0 {
		budget = MaxDecodedBytes(l.MaxExpansion, n)
	}
	if l.MaxDecodedBytes > 0 {
		budget = min(budget, l.MaxDecodedBytes)
	}
	return budget
}

// MaxAllocFactor bounds what decoding allocates, garbage included, per
// byte it may hold (MaxDecodedBytes): arrays grow by doubling, so one
// decode allocates at most about three times what it keeps.
// TestDecodersAllocateInProportionToTheirInput holds every decoder to it.
const MaxAllocFactor = 3

// Sizes charged for each decoded element, as the structs take in memory
// (unsafe.Sizeof on 64-bit platforms).
const (
	sizeSeries    = 96
	sizeLabel     = 32
	sizeSample    = 16
	sizeExemplar  = 40
	sizeHistogram = 240
	sizeMetadata  = 56
	sizeSpan      = 8
	sizeCount     = 8
)

// v2Tags are the one-byte tags of remote-write 2.0's request fields 4
// (symbols) and 5 (timeseries), both length-delimited.
const (
	tagV2Symbols    = 4<<3 | byte(protowire.BytesType)
	tagV2TimeSeries = 5<<3 | byte(protowire.BytesType)
)

// checkPolicy applies the rules that ValidateWriteRequest shares with the
// Decoder to b, a request the wire format accepts: no series without
// labels, no remote-write 2.0 request.
func checkPolicy(b []byte) error {
	var v1, v2 bool
	for i := 0; len(b) > 0; i++ {
		num, typ, v, n := nextField(b)
		if n < 0 {
			return nil // accepted by the generated decoder's leniency only
		}
		switch {
		case typ != protowire.BytesType:
		case num == 1:
			v1 = true
			if !hasLabel(v) {
				return fmt.Errorf("series %d: %w", i, ErrSeriesWithoutLabels)
			}
		case num == 3:
			v1 = true
		case num == 4 || num == 5:
			v2 = true
		}
		b = b[n:]
	}
	if v2 && !v1 {
		return ErrRemoteWrite2
	}
	return nil
}

// hasLabel reports whether the TimeSeries b has a label field.
func hasLabel(b []byte) bool {
	for len(b) > 0 {
		num, typ, _, n := nextField(b)
		if n < 0 {
			return true // not for this check to judge
		}
		if num == 1 && typ == protowire.BytesType {
			return true
		}
		b = b[n:]
	}
	return false
}

// maxSnappyRatio bounds the decoded length a snappy block may claim per
// byte of its own before refuseSnappy declines to decode it: snappy
// compresses at most about 21 to 1, so a larger claim is not snappy, and
// the bound keeps the check's allocation proportional to the input.
const maxSnappyRatio = 32

// refuseSnappy returns ErrSnappy when b, which did not decode as a
// WriteRequest, is a snappy block. Only refused values pay for the check.
func refuseSnappy(b []byte, err error) error {
	n, derr := snappy.DecodedLen(b)
	if derr != nil || n == 0 || n > maxSnappyRatio*len(b) {
		return err
	}
	if _, derr := snappy.Decode(nil, b); derr != nil {
		return err
	}
	return ErrSnappy
}
