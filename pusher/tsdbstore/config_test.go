package tsdbstore

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestConfigFlagDefaults(t *testing.T) {
	var cfg Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if cfg != DefaultConfig() {
		t.Fatalf("flag defaults %+v differ from DefaultConfig %+v", cfg, DefaultConfig())
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if got := cfg.maxBlockDuration(); got != 36*time.Hour {
		t.Errorf("max block duration for 15d retention = %v, want 36h (a tenth)", got)
	}

	// Every flag's help states its default: the flag package appends it for
	// non-zero defaults, the help text itself for zero ones.
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	fs.VisitAll(func(f *flag.Flag) {
		i := strings.Index(help.String(), "-"+f.Name+" ")
		if i < 0 { // a bool flag's name ends its line: it has no type to show
			i = strings.Index(help.String(), "-"+f.Name+"\n")
		}
		if i < 0 {
			t.Fatalf("flag %s missing from help", f.Name)
		}
		text := help.String()[i:]
		if j := strings.Index(text[1:], "\n  -"); j >= 0 {
			text = text[:j+1]
		}
		if !strings.Contains(text, "default") {
			t.Errorf("help of -%s does not state its default:\n%s", f.Name, text)
		}
	})
}

func TestConfigFlagsParse(t *testing.T) {
	var cfg Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{
		"-storage.path=/var/lib/ferry", "-storage.retention=5h", "-storage.idle-timeout=0",
		"-storage.block-duration=1h", "-storage.out-of-order-window=5m", "-storage.max-exemplars=0",
		"-limits.max-series-per-tenant=10", "-limits.max-metadata-per-tenant=0", "-storage.stripe-size=256",
		"-storage.metrics-top-tenants=3", "-pusher.max-tenants=7", "-storage.sync-concurrency=4",
		"-storage.sync-method=syncfs", "-storage.isolation", "-storage.head-chunks-write-buffer-size=131072",
		"-storage.tenancy=shared",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Path: "/var/lib/ferry", Retention: 5 * time.Hour, IdleTimeout: 0, BlockDuration: time.Hour,
		OutOfOrderWindow: 5 * time.Minute, MaxExemplars: 0, MaxSeriesPerTenant: 10, MaxMetadataPerTenant: 0,
		CreationGracePeriod: DefaultCreationGracePeriod, PastGracePeriod: DefaultPastGracePeriod,
		MaxTenants: 7, StripeSize: 256, MetricsTopTenants: 3, SyncConcurrency: 4,
		SyncMethod: SyncSyncfs, Isolation: true, HeadChunksWriteBufferSize: 128 << 10,
		Tenancy: TenancyShared,
	}
	if cfg != want {
		t.Fatalf("parsed %+v, want %+v", cfg, want)
	}
	if err := cfg.Validate(); (err == nil) != (syncfsSupported() == nil) {
		t.Fatalf("validate: %v; syncfs here: %v", err, syncfsSupported())
	}
	if got := cfg.maxBlockDuration(); got != time.Hour {
		t.Errorf("max block duration = %v, want the block duration 1h (a tenth of 5h is shorter)", got)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		flag   string
		modify func(*Config)
	}{
		{"-storage.path", func(c *Config) { c.Path = "" }},
		{"-storage.retention", func(c *Config) { c.Retention = 0 }},
		{"-storage.retention", func(c *Config) { c.Retention = -time.Hour }},
		{"-storage.retention", func(c *Config) { c.Retention = time.Hour }}, // shorter than the 2h block
		{"-storage.idle-timeout", func(c *Config) { c.IdleTimeout = -time.Second }},
		{"-storage.block-duration", func(c *Config) { c.BlockDuration = 0 }},
		{"-storage.block-duration", func(c *Config) { c.BlockDuration = 1500 * time.Microsecond }},
		{"-storage.out-of-order-window", func(c *Config) { c.OutOfOrderWindow = -time.Minute }},
		{"-storage.max-exemplars", func(c *Config) { c.MaxExemplars = -1 }},
		{"-storage.stripe-size", func(c *Config) { c.StripeSize = 1000 }},
		{"-storage.head-chunks-write-buffer-size", func(c *Config) { c.HeadChunksWriteBufferSize = 32 << 10 }},
		{"-storage.head-chunks-write-buffer-size", func(c *Config) { c.HeadChunksWriteBufferSize = 16 << 20 }},
		{"-storage.head-chunks-write-buffer-size", func(c *Config) { c.HeadChunksWriteBufferSize = 64<<10 + 1 }},
		{"-storage.sync-concurrency", func(c *Config) { c.SyncConcurrency = -1 }},
		{"-storage.sync-method", func(c *Config) { c.SyncMethod = "fdatasync" }},
		{"-storage.tenancy", func(c *Config) { c.Tenancy = "per-tenant" }},
		{"-limits.max-series-per-tenant", func(c *Config) { c.MaxSeriesPerTenant = -1 }},
		{"-limits.max-metadata-per-tenant", func(c *Config) { c.MaxMetadataPerTenant = -1 }},
		{"-limits.creation-grace-period", func(c *Config) { c.CreationGracePeriod = -time.Minute }},
	}
	for _, tc := range cases {
		cfg := DefaultConfig()
		tc.modify(&cfg)
		err := cfg.Validate()
		if err == nil {
			t.Errorf("%+v: no error, want one naming %s", cfg, tc.flag)
			continue
		}
		if !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("error %q does not name %s", err, tc.flag)
		}
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Path = t.TempDir()
	cfg.IdleTimeout = -1
	if _, err := New(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "-storage.idle-timeout") {
		t.Fatalf("New with a negative idle timeout: %v", err)
	}
}

// TestSyncMethodDefaultAndRefusal: fsync is the default, syncfs is
// accepted where the kernel's syncfs reports writeback errors, and refused
// with the reason where it does not.
func TestSyncMethodDefaultAndRefusal(t *testing.T) {
	var cfg Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if cfg.SyncMethod != SyncFsync {
		t.Fatalf("default -storage.sync-method = %q, want %q", cfg.SyncMethod, SyncFsync)
	}
	cfg.SyncMethod = SyncSyncfs
	if err := cfg.Validate(); (err == nil) != (syncfsSupported() == nil) {
		t.Fatalf("syncfs: %v; supported here: %v", err, syncfsSupported())
	}
	old := syncfsCheck
	t.Cleanup(func() { syncfsCheck = old })
	syncfsCheck = func() error { return checkSyncfsKernel("5.4.0-150-generic") }
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "-storage.sync-method=syncfs") || !strings.Contains(err.Error(), "5.4.0-150-generic") {
		t.Fatalf("syncfs on Linux 5.4: %v, want a refusal naming the flag and the kernel", err)
	}
	cfg.SyncMethod = SyncFsync
	if err := cfg.Validate(); err != nil {
		t.Fatalf("fsync on Linux 5.4: %v", err)
	}
}
