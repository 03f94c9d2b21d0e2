package gateway

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// split marshals req into record values of at most max bytes each, cutting
// between series (and between metadata entries), never inside one: each
// value is a complete WriteRequest the consumer reads on its own. One
// series larger than max on its own cannot be cut and is an error.
func split(req *prompb.WriteRequest, max int) ([][]byte, error) {
	if req.Size() <= max {
		b, err := req.Marshal()
		if err != nil {
			return nil, fmt.Errorf("marshal write request: %w", err)
		}
		return [][]byte{b}, nil
	}
	var (
		out  [][]byte
		cur  prompb.WriteRequest
		size int
	)
	flush := func() error {
		if len(cur.Timeseries) == 0 && len(cur.Metadata) == 0 {
			return nil
		}
		b, err := cur.Marshal()
		if err != nil {
			return fmt.Errorf("marshal write request: %w", err)
		}
		out = append(out, b)
		cur, size = prompb.WriteRequest{}, 0
		return nil
	}
	for i := range req.Timeseries {
		n := fieldSize(req.Timeseries[i].Size())
		if n > max {
			return nil, fmt.Errorf("series %s alone takes %d bytes, over the record limit of %d", formatSeries(req.Timeseries[i].Labels), n, max)
		}
		if size+n > max {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		cur.Timeseries = append(cur.Timeseries, req.Timeseries[i])
		size += n
	}
	for i := range req.Metadata {
		n := fieldSize(req.Metadata[i].Size())
		if n > max {
			return nil, fmt.Errorf("metadata of %q alone takes %d bytes, over the record limit of %d", req.Metadata[i].MetricFamilyName, n, max)
		}
		if size+n > max {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		cur.Metadata = append(cur.Metadata, req.Metadata[i])
		size += n
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// fieldSize is the encoded size of an embedded message of n bytes in a
// field numbered below 16: one tag byte, the length varint, the message.
func fieldSize(n int) int {
	return 1 + protowire.SizeBytes(n)
}
