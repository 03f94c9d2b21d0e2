package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// kafkaPartition is the partition Kafka's Java client picks for key among
// n partitions: the positive part of murmur2 (seed 0x9747b28c) modulo n.
// docs/gateway.md tells users to predict a tenant's partition this way.
func kafkaPartition(key []byte, n int32) int32 {
	const m = uint32(0x5bd1e995)
	h := uint32(0x9747b28c) ^ uint32(len(key))
	i := 0
	for ; i+4 <= len(key); i += 4 {
		k := binary.LittleEndian.Uint32(key[i:])
		k *= m
		k ^= k >> 24
		k *= m
		h = h*m ^ k
	}
	switch rest := key[i:]; len(rest) {
	case 3:
		h ^= uint32(rest[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(rest[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(rest[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h&0x7fffffff) % n
}

func TestTheGatewayProducesConsumerRecordsOnTheTenantsKafkaPartition(t *testing.T) {
	t.Parallel()
	p := pipeline{broker: kafkatest.Current(t)}
	p.topic = p.broker.CreateTopic(t, 4)
	cfg := gatewayConfig(t, p, "127.0.0.1:0")
	g := startGateway(t, cfg)
	ctx := t.Context()
	tenants := []string{"a", "team-b", "tenant-0", "tenant-1", "tenant-2", "tenant-3", "x", "a-much-longer-tenant-name"}
	sent := map[string][]byte{}
	for _, tenant := range tenants {
		req := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
			Labels:  []prompb.Label{{Name: "__name__", Value: "up"}, {Name: "tenant", Value: tenant}},
			Samples: []prompb.Sample{{Value: 1, Timestamp: time.Now().UnixMilli()}},
		}}}
		raw, _ := req.Marshal()
		sent[tenant] = raw
		hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.HTTPAddr()+"/api/v1/push", bytes.NewReader(snappy.Encode(nil, raw)))
		hreq.Header.Set("Content-Type", "application/x-protobuf")
		hreq.Header.Set("Content-Encoding", "snappy")
		hreq.Header.Set("X-Scope-OrgID", tenant)
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("tenant %s: status %d", tenant, resp.StatusCode)
		}
	}
	cl := p.broker.Client(t, kgo.ConsumeTopics(p.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	for got < len(tenants) {
		fs := cl.PollFetches(pctx)
		if err := pctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", got, len(tenants), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			tenant := string(r.Key)
			if want := kafkaPartition(r.Key, 4); r.Partition != want {
				t.Errorf("tenant %s on partition %d, want %d", tenant, r.Partition, want)
			}
			if !bytes.Equal(r.Value, sent[tenant]) {
				t.Errorf("tenant %s: record value is not the request sent", tenant)
			}
		})
	}
}
