package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// This file holds what a Cluster tells about its partitions' leaders and
// replicas.

// Leaders returns the leader's node ID of every partition of topic, as the
// cluster's metadata says now (-1: no leader).
func (c *Cluster) Leaders(t testing.TB, topic string) map[int32]int32 {
	t.Helper()
	var out map[int32]int32
	err := retry(func(ctx context.Context) error {
		md, err := c.adm.Metadata(ctx, topic)
		if err != nil {
			return err
		}
		td := md.Topics[topic]
		if td.Err != nil {
			return td.Err
		}
		out = make(map[int32]int32, len(td.Partitions))
		for p, pd := range td.Partitions {
			out[p] = pd.Leader
		}
		return nil
	})
	if err != nil {
		t.Fatalf("kafkatest: leaders of %q: %v", topic, err)
	}
	return out
}

// LeadingMost returns the node leading the most partitions of topic (the
// lowest ID on a tie) and how many it leads.
func (c *Cluster) LeadingMost(t testing.TB, topic string) (id int32, partitions int) {
	t.Helper()
	count := map[int32]int{}
	for _, l := range c.Leaders(t, topic) {
		if l >= 0 {
			count[l]++
		}
	}
	id = -1
	for _, n := range c.NodeIDs() {
		if count[n] > partitions {
			id, partitions = n, count[n]
		}
	}
	if id < 0 {
		t.Fatalf("kafkatest: no partition of %q has a leader", topic)
	}
	return id, partitions
}

// WaitInSync waits until every partition of topic has a leader and all
// ClusterSize replicas in sync: after a restart, the point from which the
// cluster can lose a node again without refusing writes.
func (c *Cluster) WaitInSync(t testing.TB, topic string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		md, err := c.adm.Metadata(ctx, topic)
		last = err
		if err == nil {
			last = allInSync(md.Topics[topic])
		}
		if last == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkatest: %q not fully in sync after %s: %v", topic, timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func allInSync(td kadm.TopicDetail) error {
	if td.Err != nil {
		return td.Err
	}
	if len(td.Partitions) == 0 {
		return errors.New("no partitions")
	}
	for p, pd := range td.Partitions {
		switch {
		case pd.Err != nil:
			return fmt.Errorf("partition %d: %w", p, pd.Err)
		case pd.Leader < 0:
			return fmt.Errorf("partition %d has no leader", p)
		case len(pd.ISR) < ClusterSize:
			return fmt.Errorf("partition %d has %d of %d replicas in sync (%v)", p, len(pd.ISR), ClusterSize, pd.ISR)
		}
	}
	return nil
}
