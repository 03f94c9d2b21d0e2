package codec

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/ferrylabs/ferry/internal/loadgen"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
)

func TestTierOf(t *testing.T) {
	for _, tc := range []struct {
		size, tier int
		ok         bool
	}{
		{0, 0, true},
		{1, 0, true},
		{1 << minTier, 0, true},
		{1<<minTier + 1, 1, true},
		{40_000, 16 - minTier, true}, // a 40 KB message gets 64 KiB, not gRPC's 1 MiB
		{1 << maxTier, maxTier - minTier, true},
		{1<<maxTier + 1, 0, false},
	} {
		tier, ok := tierOf(tc.size)
		if tier != tc.tier || ok != tc.ok {
			t.Errorf("tierOf(%d) = %d, %v; want %d, %v", tc.size, tier, ok, tc.tier, tc.ok)
		}
	}
}

func TestDirtyPoolSizes(t *testing.T) {
	p := new(dirtyPool)
	for _, size := range []int{1, 1000, 1025, 40_000, 1 << 20, 1<<maxTier + 5} {
		bp := p.Get(size)
		if len(*bp) != size {
			t.Fatalf("Get(%d) has length %d", size, len(*bp))
		}
		if size <= 1<<maxTier && cap(*bp) >= 2*max(size, 1<<minTier) {
			t.Fatalf("Get(%d) has capacity %d, more than twice what it needs", size, cap(*bp))
		}
		p.Put(bp)
	}
	// A buffer of another capacity must not land in a tier, where a Get
	// would slice it beyond its capacity.
	odd := make([]byte, 3000)
	p.Put(&odd)
	if bp := p.Get(4000); cap(*bp) < 4000 {
		t.Fatalf("Get(4000) returned a buffer of capacity %d", cap(*bp))
	}
}

// pushBatch is a PushBatch message of n requests of 10-series records,
// the consumer's messages at (4,1000,10).
func pushBatch(n int) *wire.PushBatch {
	sh := loadgen.Shape{Series: 10, StartMs: 1_700_000_000_000, StepMs: 15_000}
	b := &wire.PushBatch{}
	for i := range n {
		tenant := loadgen.Tenant(i)
		b.Requests = append(b.Requests, &wire.PushRequest{
			RequestID: uint64(i + 1), Sequence: uint64(i + 1),
			Tenant: tenant, Topic: "ingest", Partition: 1, Offset: int64(i),
			Value: sh.Marshal(tenant, i),
		})
	}
	return b
}

// TestMarshalReusesUnclearedBuffers marshals a message into a buffer a
// larger one used before: no byte of the earlier one may show.
func TestMarshalReusesUnclearedBuffers(t *testing.T) {
	c := New()
	for _, n := range []int{60, 45, 2, 60, 1} {
		msg := pushBatch(n)
		want := marshalFresh(t, msg)
		data, err := c.Marshal(msg)
		if err != nil {
			t.Fatalf("%d requests: %v", n, err)
		}
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("%d requests: the message differs from a fresh marshal", n)
		}
		data.Free()
	}
}

func marshalFresh(t *testing.T, m gogoMessage) []byte {
	t.Helper()
	b := make([]byte, m.Size())
	if _, err := m.MarshalToSizedBuffer(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// short writes fewer bytes than its Size, as a message whose Size and
// marshal disagree would.
type short struct{ size int }

func (s short) Size() int { return s.size }
func (s short) MarshalToSizedBuffer(b []byte) (int, error) {
	b[len(b)-1] = 1
	return 1, nil
}
func (short) Unmarshal([]byte) error { return errors.New("not read") }

// TestMarshalRefusesAShortWrite: the buffer is not cleared, so a message
// that wrote less than its size would carry an earlier message's bytes.
func TestMarshalRefusesAShortWrite(t *testing.T) {
	c := New()
	if _, err := c.Marshal(short{size: 4000}); err == nil {
		t.Fatal("a message that wrote 1 byte of 4000 was marshalled")
	}
}

// BenchmarkMarshalBatch marshals PushBatch messages of 10-series records:
// 20 requests is the mean message at (4,1000,10), 60 one beyond gRPC's
// 32 KiB tier.
func BenchmarkMarshalBatch(b *testing.B) {
	for _, n := range []int{20, 60, 256} {
		msg := pushBatch(n)
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) {
			c := New()
			b.SetBytes(int64(msg.Size()))
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.Marshal(msg)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}

// TestSmallMessagesArePooled: an answer of a few bytes, sent once per
// record or two, costs one allocation (the slice gRPC is handed), not a
// buffer and an interface boxing it too.
func TestSmallMessagesArePooled(t *testing.T) {
	c := New()
	msg := &ferryv1.PushBatchResponse{Responses: []*ferryv1.PushResponse{{RequestId: 7, Status: ferryv1.AckStatus_ACK_STATUS_OK}}}
	want, _ := msg.Marshal()
	allocs := testing.AllocsPerRun(1000, func() {
		data, err := c.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Fatal("the message differs from the generated Marshal")
		}
		data.Free()
	})
	// Materialize allocates the copy it returns. Under the race detector
	// sync.Pool drops a quarter of the buffers put back, and each drop
	// costs the next message a buffer and its boxing: two more on average
	// for every four messages, so the bound there is one higher (it failed
	// 1% of race runs at 2).
	limit := 2.0
	if raceEnabled {
		limit = 3
	}
	if allocs > limit {
		t.Fatalf("%v allocations per small message, want at most %v (one of them the test's)", allocs, limit)
	}
}
