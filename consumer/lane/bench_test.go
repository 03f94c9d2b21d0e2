package lane

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/benchfixture"
)

// benchSender answers every request OK from one goroutine, in the order
// sent, as the sender's receive goroutine hands the pusher's answers on.
type benchSender struct {
	reqs chan *benchCall
}

type benchCall struct {
	ch chan Answer
}

func (s *benchSender) Send(_ context.Context, _ Call, _ *Item, _ uint64) Call {
	c := &benchCall{ch: make(chan Answer, 1)}
	s.reqs <- c
	return c
}

func (s *benchSender) run() {
	for c := range s.reqs {
		c.ch <- Answer{Status: OK}
	}
}

func (c *benchCall) Wait(ctx context.Context, wake <-chan struct{}) (Answer, bool, error) {
	select {
	case a := <-c.ch:
		return a, false, nil
	case <-wake:
		return Answer{}, true, nil
	case <-ctx.Done():
		return Answer{}, false, ctx.Err()
	}
}

// BenchmarkLanes is the lanes' cost per record (cpu-ns/op: the process's
// CPU time, all goroutines, which the machine's load moves less than
// ns/op): records of random tenants
// added one by one, validated by another goroutine, sent and answered OK
// at once by a fake pusher's goroutine. With few tenants a lane usually
// has requests in flight when its next record comes; with many, rarely.
func BenchmarkLanes(b *testing.B) {
	for _, tenants := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			snd := &benchSender{reqs: make(chan *benchCall, 10000)}
			go snd.run()
			defer close(snd.reqs)
			var finished atomic.Int64
			ls := New(Config{InflightPerTenant: 16, RetryingShare: 64, WindowRecords: 5000, WindowBytes: 64 << 20},
				World{Sender: snd, Rereader: RereadFunc(nil), Finish: func(*Item) { finished.Add(1) }})
			ls.Start(ctx)
			validate := make(chan *Item, 5000)
			defer close(validate)
			go func() {
				for it := range validate {
					it.Validated()
				}
			}()
			names := make([]string, tenants)
			for i := range names {
				names[i] = fmt.Sprintf("tenant-%d", i)
			}
			rnd := rand.New(rand.NewPCG(1, 2))
			value := make([]byte, 100)
			var offset int64
			b.ReportAllocs()
			start := benchfixture.CPUTime(b)
			for b.Loop() {
				it := &Item{Tenant: names[rnd.IntN(tenants)], Offset: offset, Value: value, Size: len(value)}
				offset++
				if _, err := ls.Add(ctx, it, func() bool { return true }); err != nil {
					b.Fatal(err)
				}
				validate <- it
			}
			if !ls.Wait(ctx) || finished.Load() != offset {
				b.Fatalf("finished %d of %d records", finished.Load(), offset)
			}
			benchfixture.ReportCPU(b, start)
		})
	}
}
