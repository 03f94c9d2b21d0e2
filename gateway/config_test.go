package gateway

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestConfigValidateNamesTheBadFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		flag   string
	}{
		{"should fail without a Kafka address", func(c *Config) { c.KafkaAddress = " " }, "-kafka.address"},
		{"should fail without a topic", func(c *Config) { c.Topic = "" }, "-kafka.topic"},
		{"should fail on a tenant header that is no header name", func(c *Config) { c.TenantHeader = "X Org" }, "-gateway.tenant-header"},
		{"should fail on an invalid default tenant", func(c *Config) { c.DefaultTenant = "a/b" }, "-gateway.default-tenant"},
		{"should fail on a zero request limit", func(c *Config) { c.MaxRequestBytes = 0 }, "-gateway.max-request-bytes"},
		{"should fail on a tiny record limit", func(c *Config) { c.MaxRecordBytes = 10 }, "-gateway.max-record-bytes"},
		{"should fail on a zero produce timeout", func(c *Config) { c.ProduceTimeout = 0 }, "-gateway.produce-timeout"},
		{"should fail on a negative rate limit", func(c *Config) { c.TenantRateLimit = -1 }, "-gateway.tenant-rate-limit"},
		{"should fail on a zero burst", func(c *Config) { c.TenantBurst = 0 }, "-gateway.tenant-burst"},
		{"should fail when one request cannot fit the in-flight bytes", func(c *Config) { c.MaxInflightBytes = 1 }, "-gateway.max-inflight-bytes"},
		{"should fail on a zero read timeout", func(c *Config) { c.ReadTimeout = 0 }, "-gateway.read-timeout"},
		{"should fail when the write timeout does not cover the produce timeout", func(c *Config) { c.WriteTimeout = 5 * time.Second }, "-gateway.write-timeout"},
		{"should fail on the pusher's limits too", func(c *Config) { c.Limits.MaxLabelsPerSeries = 0 }, "-limits.max-labels-per-series"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var cfg Config
			cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
			if err := cfg.Validate(); err != nil {
				t.Fatalf("defaults: %v", err)
			}
			tc.mutate(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.flag)
			}
		})
	}
}
