package gateway

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/limits"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// split marshals req into record values of at most max bytes each, cutting
// between series (and between metadata entries), never inside one: each
// value is a complete WriteRequest the consumer reads on its own. One
// series larger than max on its own cannot be cut and is an error.
func split(req *prompb.WriteRequest, max int) ([][]byte, error) {
	return new(scratch).split(req, max)
}

// split is split with the scratch's memory: the values are windows of
// s.out, one after another, each encoded as (*prompb.WriteRequest).Marshal
// encodes its series and metadata. Every element's size is computed once,
// where marshalling each value computed all of them twice.
func (s *scratch) split(req *prompb.WriteRequest, max int) ([][]byte, error) {
	s.order = s.order[:0]
	values, _, err := s.splitOrdered(req, max)
	return values, err
}

// splitShards is split for a tenant whose shard is width partitions wide:
// a value holds series of one slot only, so that it can go to the slot's
// partition. slots[k] is the slot of values[k]; metadata, which belong to
// no series, ride with the last slot's series (slot 0 without series).
func (s *scratch) splitShards(req *prompb.WriteRequest, max, width int) (values [][]byte, slots []int, err error) {
	s.slotOrder(req, width)
	return s.splitOrdered(req, max)
}

// splitOrdered is split, the series taken in s.order when it is not
// empty: a value is then also cut where the slot (s.slots) changes.
func (s *scratch) splitOrdered(req *prompb.WriteRequest, max int) ([][]byte, []int, error) {
	sizes, total := s.sizes[:0], 0
	for i := range req.Timeseries {
		n := req.Timeseries[i].Size()
		if fieldSize(n) > max {
			return nil, nil, fmt.Errorf("series %s alone takes %d bytes, over the record limit of %d", limits.FormatLabels(req.Timeseries[i].Labels), fieldSize(n), max)
		}
		sizes, total = append(sizes, n), total+fieldSize(n)
	}
	for i := range req.Metadata {
		n := req.Metadata[i].Size()
		if fieldSize(n) > max {
			return nil, nil, fmt.Errorf("metadata of %q alone takes %d bytes, over the record limit of %d", req.Metadata[i].MetricFamilyName, fieldSize(n), max)
		}
		sizes, total = append(sizes, n), total+fieldSize(n)
	}
	s.sizes = sizes
	w := recordWriter{buf: grow(s.out, total), values: s.values[:0], slots: s.valueSlots[:0], max: max}
	s.out = w.buf
	for k := range req.Timeseries {
		i := k
		if len(s.order) > 0 {
			i = s.order[k]
			w.cut(s.slots[i])
		}
		if err := w.add(1, sizes[i], req.Timeseries[i].MarshalToSizedBuffer); err != nil {
			return nil, nil, err
		}
	}
	for i := range req.Metadata {
		if err := w.add(3, sizes[len(req.Timeseries)+i], req.Metadata[i].MarshalToSizedBuffer); err != nil {
			return nil, nil, err
		}
	}
	w.flush()
	s.values, s.valueSlots = w.values, w.slots
	return w.values, w.slots, nil
}

// recordWriter lays out the embedded messages of record values in buf:
// values[k] is buf[start_k:pos_k], capacity cut at its end.
type recordWriter struct {
	buf        []byte
	values     [][]byte
	slots      []int // slots[k] is the slot of values[k]
	slot       int   // the slot of the value being written
	start, pos int
	max        int
}

// cut ends the current value when the next series is of another slot.
func (w *recordWriter) cut(slot int) {
	if slot != w.slot {
		w.flush()
		w.slot = slot
	}
}

// add writes the WriteRequest field num holding a message of n bytes,
// starting a new value first when the current one would go over max.
func (w *recordWriter) add(num byte, n int, marshal func([]byte) (int, error)) error {
	if w.pos-w.start+fieldSize(n) > w.max {
		w.flush()
	}
	w.buf[w.pos] = num<<3 | byte(protowire.BytesType)
	w.pos++
	w.pos += binary.PutUvarint(w.buf[w.pos:], uint64(n)) //nolint:gosec // a size, not negative
	m, err := marshal(w.buf[w.pos : w.pos+n])
	if err == nil && m != n {
		err = fmt.Errorf("message of %d bytes took %d", n, m)
	}
	if err != nil {
		return fmt.Errorf("marshal write request: %w", err)
	}
	w.pos += n
	return nil
}

// flush ends the current value, if it has anything.
func (w *recordWriter) flush() {
	if w.pos > w.start {
		w.values = append(w.values, w.buf[w.start:w.pos:w.pos])
		w.slots = append(w.slots, w.slot)
		w.start = w.pos
	}
}

// fieldSize is the encoded size of an embedded message of n bytes in a
// field numbered below 16: one tag byte, the length varint, the message.
func fieldSize(n int) int {
	return 1 + protowire.SizeBytes(n)
}
