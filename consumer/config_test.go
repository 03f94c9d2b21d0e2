package consumer

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPartitionFromInstanceID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want int32
		ok   bool
	}{
		{"consumer-3", 3, true},
		{"ferry-consumer-12", 12, true},
		{"7", 7, true},
		{"consumer-03", 3, true},
		{"consumer", 0, false},
		{"", 0, false},
		{"consumer-99999999999", 0, false},
	} {
		got, err := PartitionFromInstanceID(tc.id)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("PartitionFromInstanceID(%q) = %d, %v; want %d, ok=%v", tc.id, got, err, tc.want, tc.ok)
		}
	}
}

func TestOwnedPartitionsPreferTheExplicitList(t *testing.T) {
	cfg := Config{InstanceID: "consumer-3", Partitions: "5, 1,5"}
	got, err := cfg.OwnedPartitions()
	if err != nil || !slices.Equal(got, []int32{5, 1}) {
		t.Fatalf("OwnedPartitions = %v, %v; want [5 1]", got, err)
	}
}

func TestValidateNamesTheBadFlag(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		flag   string
	}{
		{"should fail without a broker address", func(c *Config) { c.KafkaAddress = " , " }, "-kafka.address"},
		{"should fail on an address without a port", func(c *Config) { c.KafkaAddress = "kafka" }, "-kafka.address"},
		{"should fail on an unknown position", func(c *Config) { c.ConsumeFromPosition = "middle" }, "-kafka.consume-from-position"},
		{"should fail on timestamp position without a timestamp", func(c *Config) { c.ConsumeFromPosition = PositionTimestamp }, "-kafka.consume-from-timestamp"},
		{"should fail on an instance ID without a number", func(c *Config) { c.InstanceID = "consumer" }, "-instance-id"},
		{"should fail on a bad partition list", func(c *Config) { c.Partitions = "1,x" }, "-kafka.partitions"},
		{"should fail on a negative partition", func(c *Config) { c.Partitions = "-1" }, "-kafka.partitions"},
		{"should fail on an unparsable pusher address", func(c *Config) { c.PusherAddress = "pusher" }, "-pusher.address"},
		{"should fail on a negative commit interval", func(c *Config) { c.CommitInterval = -time.Second }, "-kafka.commit-interval"},
		{"should fail on a zero shutdown timeout", func(c *Config) { c.ShutdownTimeout = 0 }, "-shutdown-timeout"},
		{"should fail when max backoff is below min", func(c *Config) { c.BackoffMax = time.Millisecond }, "-consumer.backoff-max"},
		{"should fail on a zero window", func(c *Config) { c.MaxInflightRequests = 0 }, "-consumer.max-inflight-requests"},
		{"should fail on an empty topic", func(c *Config) { c.Topic = "" }, "-kafka.topic"},
		{"should fail on a negative lag at startup", func(c *Config) { c.MaxLagAtStartup = -time.Second }, "-kafka.max-consumer-lag-at-startup"},
		{"should fail on a zero unreachable timeout", func(c *Config) { c.UnreachableTimeout = 0 }, "-consumer.unreachable-timeout"},
		{"should fail on a negative message bound", func(c *Config) { c.MaxMessageRequests = -1 }, "-pusher.max-message-requests"},
		{"should fail on zero message bytes", func(c *Config) { c.MaxMessageBytes = 0 }, "-pusher.max-message-bytes"},
		{"should fail on message bytes over what every pusher accepts", func(c *Config) { c.MaxMessageBytes = 4<<20 + 1 }, "-pusher.max-message-bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg Config
			cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
			cfg.InstanceID = "consumer-0"
			if err := cfg.Validate(); err != nil {
				t.Fatalf("defaults do not validate: %v", err)
			}
			tc.mutate(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.flag)
			}
		})
	}
}
