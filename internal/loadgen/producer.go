package loadgen

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Producer writes remote-write requests for several tenants to Kafka at a
// steady rate: one request per tenant per step, spread over the rate. It is
// the load of ferry-loadgen and of the dev mode.
type Producer struct {
	Client  *kgo.Client
	Topic   string
	Tenants int
	// Rate is records per second over all tenants.
	Rate  int
	Shape Shape

	produced atomic.Int64
	failed   atomic.Int64
}

// Produced returns the records acknowledged by Kafka so far.
func (p *Producer) Produced() int64 { return p.produced.Load() }

// Failed returns the records Kafka refused.
func (p *Producer) Failed() int64 { return p.failed.Load() }

// Run produces until ctx is done, then waits for outstanding records.
func (p *Producer) Run(ctx context.Context) error {
	if p.Tenants <= 0 || p.Rate <= 0 {
		return fmt.Errorf("load producer: tenants (%d) and rate (%d) must be positive", p.Tenants, p.Rate)
	}
	tick := time.NewTicker(time.Second / time.Duration(p.Rate))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return p.Client.Flush(context.WithoutCancel(ctx))
		case <-tick.C:
		}
		tenant := Tenant(n % p.Tenants)
		step := n / p.Tenants
		rec := &kgo.Record{Topic: p.Topic, Key: []byte(tenant), Value: p.Shape.Marshal(tenant, step)}
		p.Client.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				p.failed.Add(1)
				return
			}
			p.produced.Add(1)
		})
	}
}

// WallClockShape returns a shape whose sample timestamps keep pace with the
// wall clock at the given rate: one step per round over the tenants. A
// later run then appends after an earlier one instead of out of order.
func WallClockShape(series, tenants, rate int) Shape {
	return Shape{
		Series:  series,
		StartMs: time.Now().UnixMilli(),
		StepMs:  max(1, int64(1000*tenants/rate)),
	}
}
