package tsdbstore

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/prometheus/prometheus/tsdb/chunks"
)

// Defaults of the flags. Retention and block duration are Prometheus'
// defaults so that a Ferry TSDB behaves like a Prometheus one.
const (
	DefaultPath               = "./data/tsdb"
	DefaultRetention          = 15 * 24 * time.Hour
	DefaultIdleTimeout        = 30 * time.Minute
	DefaultBlockDuration      = 2 * time.Hour
	DefaultMaxSeriesPerTenant = 500_000
	// DefaultMaxExemplars is 0, as in Mimir: the exemplar buffer is
	// allocated whole when a tenant opens, so a default size would cost
	// every tenant its memory whether it sends exemplars or not.
	DefaultMaxExemplars = 0
	DefaultMaxTenants   = 1000
	// DefaultPastGracePeriod is pusher.DefaultPastGracePeriod.
	DefaultPastGracePeriod      = 10 * 365 * 24 * time.Hour
	DefaultMetricsTopTenants    = 10
	DefaultMaxMetadataPerTenant = 100_000
	DefaultCreationGracePeriod  = 10 * time.Minute
	// DefaultStripeSize is far below Prometheus' 16384: that size costs
	// every tenant about 4 MB of lock and hash tables before its first
	// series, which a pusher with thousands of tenants cannot afford
	// (docs/benchmarks.md). The stripes only spread lock contention within
	// one tenant, and the consumer pushes a tenant one request at a time.
	// Even 1024 stripes held about 240 KB of each small tenant's live heap
	// (BenchmarkTenantMemory: 814 KB a tenant of 10 series at 1024 stripes,
	// 572 KB at 128), while a tenant of a million series spreads over 128
	// stripes as well as over 1024.
	DefaultStripeSize = 128
	// DefaultHeadChunksWriteBufferSize is Prometheus' smallest, against
	// its default of 4 MiB: each tenant allocates the buffer when its TSDB
	// first writes full head chunks to disk, a minute after it opens, so
	// with a TSDB per tenant 4 MiB was 4 MiB of heap per tenant, 4 GiB at
	// 1,000 tenants (docs/benchmarks.md). A smaller buffer only means more,
	// smaller writes, once a minute.
	DefaultHeadChunksWriteBufferSize = 64 << 10
	// DefaultSyncConcurrency is how many tenants a Sync fsyncs at once:
	// a filesystem's journal commits concurrent fsyncs together, so a
	// Sync of many tenants takes a fraction of the time of one after the
	// other. On the benchmark machine (ext4 on a virtual disk, 2 cores)
	// an idle disk gains nothing beyond 16 (BenchmarkSync: 16, 32 and 64
	// alike), but under the pipeline's write load the mean Sync of the
	// 1000-tenant shape was 1.4-2.4 s at 16 and 0.7 s at 256. Each fsync
	// in flight holds an OS thread, a few KiB.
	DefaultSyncConcurrency = 256
	// DefaultSyncMethod is SyncFsync: it works on every OS and kernel,
	// and touches only the store's own files.
	DefaultSyncMethod = SyncFsync
	// DefaultIsolation is false: isolation costs every commit and every
	// series, and what it keeps whole is not a unit for Ferry's readers
	// (Config.Isolation).
	DefaultIsolation = false
	// DefaultTenancy is TenancySeparate: a TSDB per tenant isolates
	// tenants' queries, limits, retention and deletion, at a fixed cost
	// per tenant that TenancyShared avoids.
	DefaultTenancy = TenancySeparate
)

// The values of -storage.tenancy (shared.go).
const (
	// TenancySeparate gives each tenant a TSDB of its own, in the
	// sub-directory named after it.
	TenancySeparate = "separate"
	// TenancyShared keeps every tenant in one TSDB, each series labelled
	// with its tenant.
	TenancyShared = "shared"
)

// The values of -storage.sync-method (sync.go, syncfs.go).
const (
	// SyncFsync fsyncs each written WAL segment, and the directories that
	// gained an entry, file by file.
	SyncFsync = "fsync"
	// SyncSyncfs makes a round durable with one syncfs(2) on the storage
	// root's filesystem instead of an fsync per file (Linux 5.8 or later).
	SyncSyncfs = "syncfs"
)

// Config configures the TSDB backend.
type Config struct {
	// Path is the directory holding one sub-directory per tenant.
	Path string
	// Retention is how long blocks are kept before deletion.
	Retention time.Duration
	// IdleTimeout closes a tenant's TSDB after it received no write for this
	// long; 0 keeps every opened TSDB open until Close.
	IdleTimeout time.Duration
	// BlockDuration is the time range of the head block, i.e. of the
	// smallest block written to disk.
	BlockDuration time.Duration
	// OutOfOrderWindow is how far behind a series' newest sample a sample
	// may be and still be accepted; 0 rejects every out-of-order sample.
	OutOfOrderWindow time.Duration
	// MaxSeriesPerTenant caps the in-memory (head) series of a tenant; 0 is
	// unlimited.
	MaxSeriesPerTenant int
	// MaxExemplars is the size of each tenant's in-memory exemplar buffer;
	// 0 disables exemplar storage.
	MaxExemplars int
	// MaxMetadataPerTenant caps the metric families whose metadata is kept
	// per tenant; 0 is unlimited.
	MaxMetadataPerTenant int
	// CreationGracePeriod rejects samples more than this far in the future;
	// 0 disables the check.
	CreationGracePeriod time.Duration
	// PastGracePeriod rejects samples more than this far in the past;
	// 0 disables the check.
	PastGracePeriod time.Duration
	// MaxTenants caps the tenants open for writing at once; a write for
	// another one is a client error. 0 is unlimited.
	MaxTenants int
	// StripeSize is the number of lock stripes of each tenant's series
	// maps; a power of two.
	StripeSize int
	// HeadChunksWriteBufferSize is the size of each tenant's buffer for
	// writing full head chunks to its chunks_head files, in bytes.
	HeadChunksWriteBufferSize int
	// MetricsTopTenants is how many tenants, those with the most in-memory
	// series, /metrics names in a tenant label: anyone who can scrape
	// /metrics would otherwise learn every tenant, and its size would grow
	// with them.
	MetricsTopTenants int
	// SyncConcurrency is how many tenants a Sync fsyncs at once; 0 is
	// DefaultSyncConcurrency.
	SyncConcurrency int
	// SyncMethod is how a Sync makes the WAL durable: SyncFsync or
	// SyncSyncfs; empty is SyncFsync.
	SyncMethod string
	// Isolation turns on the TSDB's isolation: a query then sees each
	// commit of an appender (a request, or the batch of a tenant's requests
	// PushBatch appends together) whole or not at all. It costs every
	// commit a global lock taken twice (an append ID given out and
	// retired), every sample a note of that ID in its series, and every
	// series a ring of IDs. Without it, a query that runs while a commit is
	// applied may see some of its series with their new samples and others
	// without; each sample it sees is whole (a series is appended under its
	// own lock), and a query that starts after a request was answered sees
	// all of it. In Prometheus isolation keeps a scrape, or a rule group's
	// output, whole for the rules that compare its series. A request to
	// Ferry is no such unit: a remote-write client spreads one scrape over
	// its shards' concurrent requests, the gateway splits a large request
	// into several records, and the consumer applies each tenant's records
	// one after the other, so a query already sees scrapes in part, and
	// isolation would only keep an arbitrary slice of one together. So it
	// is off by default, as in the ingesters of Cortex, Mimir and Thanos.
	Isolation bool
	// Tenancy is TenancySeparate, a TSDB per tenant, or TenancyShared,
	// one TSDB for every tenant; empty is TenancySeparate. A shared TSDB
	// costs each tenant almost nothing beyond its series (a TSDB per
	// tenant costs about 600 KB of heap each, docs/benchmarks.md) and
	// makes a Sync one fsync of one WAL, but its tenants share a head:
	// one time window for appends, one exemplar buffer, one retention,
	// and a query for one tenant reads the index of all.
	Tenancy string

	// blockReloadInterval is how often each tenant's TSDB writes its full
	// head chunks to disk, among other chores; 0 is Prometheus' minute.
	// Tests shorten it to see a tenant as it is after its first minute.
	blockReloadInterval time.Duration
}

// DefaultConfig returns the configuration the flags default to.
func DefaultConfig() Config {
	return Config{
		Path:                      DefaultPath,
		Retention:                 DefaultRetention,
		IdleTimeout:               DefaultIdleTimeout,
		BlockDuration:             DefaultBlockDuration,
		MaxSeriesPerTenant:        DefaultMaxSeriesPerTenant,
		MaxExemplars:              DefaultMaxExemplars,
		MaxMetadataPerTenant:      DefaultMaxMetadataPerTenant,
		CreationGracePeriod:       DefaultCreationGracePeriod,
		PastGracePeriod:           DefaultPastGracePeriod,
		MaxTenants:                DefaultMaxTenants,
		StripeSize:                DefaultStripeSize,
		HeadChunksWriteBufferSize: DefaultHeadChunksWriteBufferSize,
		SyncConcurrency:           DefaultSyncConcurrency,
		SyncMethod:                DefaultSyncMethod,
		Isolation:                 DefaultIsolation,
		Tenancy:                   DefaultTenancy,
		MetricsTopTenants:         DefaultMetricsTopTenants,
	}
}

// RegisterFlags registers the backend's flags on f. The flag package appends
// "(default X)" to the help of every flag whose default is not the zero
// value; the help of the others says what 0 means.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	d := DefaultConfig()
	f.StringVar(&c.Path, "storage.path", d.Path,
		"Directory of the TSDB backend; each tenant gets a sub-directory named after its ID.")
	f.DurationVar(&c.Retention, "storage.retention", d.Retention,
		"How long to keep samples on disk; older blocks are deleted by the tenant's compaction. The default 360h is 15 days.")
	f.DurationVar(&c.IdleTimeout, "storage.idle-timeout", d.IdleTimeout,
		"Close a tenant's TSDB after it received no write for this long, freeing its memory; the next write reopens it. 0 disables idle closing.")
	f.DurationVar(&c.BlockDuration, "storage.block-duration", d.BlockDuration,
		"Time range of the head block: in-memory samples are written to a block on disk once the head spans 1.5 times this.")
	f.DurationVar(&c.OutOfOrderWindow, "storage.out-of-order-window", 0,
		"Accept samples up to this far behind a series' newest sample. The default 0 rejects out-of-order samples, as Prometheus does by default.")
	f.IntVar(&c.StripeSize, "storage.stripe-size", d.StripeSize,
		"Lock stripes of each tenant's in-memory series maps, a power of two. Each stripe costs memory in every open tenant; more stripes only help a tenant written by many requests at once.")
	f.IntVar(&c.HeadChunksWriteBufferSize, "storage.head-chunks-write-buffer-size", d.HeadChunksWriteBufferSize,
		"Bytes of each tenant's buffer for writing full in-memory chunks to disk, allocated when the tenant first does so; a multiple of 1024 from 65536 (64 KiB) to 8388608 (8 MiB). Every open tenant holds one; a larger buffer only means fewer, larger writes.")
	f.IntVar(&c.SyncConcurrency, "storage.sync-concurrency", d.SyncConcurrency,
		"Tenants whose write-ahead logs a Sync fsyncs at once. The filesystem commits concurrent fsyncs together, so with many tenants a Sync takes a fraction of the time of one fsync after the other.")
	f.StringVar(&c.SyncMethod, "storage.sync-method", d.SyncMethod,
		"How a Sync makes the write-ahead logs durable. fsync: fsync each WAL segment written since the last Sync, and each WAL directory that gained one. "+
			"syncfs (Linux 5.8 or later; refused elsewhere): one syncfs(2) of the filesystem holding -storage.path per Sync instead. It also writes out other processes' dirty files on that filesystem (harmless to them, but a Sync takes longer when others write much there), "+
			"and fails on a writeback error of any file on it since the previous syncfs; then nothing is committed and the next Sync fsyncs those tenants file by file. "+
			"Kernels before 5.8 report success from syncfs even when writeback failed. Tenants on another filesystem (a mount below -storage.path) are always fsynced.")
	f.BoolVar(&c.Isolation, "storage.isolation", d.Isolation,
		"Make a query see each commit of a request whole or not at all (the TSDB's isolation), at a cost in CPU on every commit and memory per series. "+
			"The default false lets a query that runs while a request is being applied see some of its series updated and others not yet; each sample is whole either way, and once the request is answered every query sees all of it.")
	f.StringVar(&c.Tenancy, "storage.tenancy", d.Tenancy,
		"How tenants are stored. separate: a TSDB per tenant, in a sub-directory named after it, closed when idle (isolated queries, limits and retention; about 600 KB of memory per open tenant). "+
			"shared: one TSDB for every tenant under -storage.path/"+sharedDirName+", each series labelled "+tenantLabel+" with its tenant, which the query API adds and removes "+
			"(for many small tenants: memory per series only, one WAL to sync; the tenants share one head, so a sample more than half a block behind the newest sample of any tenant is refused, "+
			"and -storage.max-exemplars is the size of one buffer for all). A storage path written in one tenancy is refused in the other.")
	f.IntVar(&c.MetricsTopTenants, "storage.metrics-top-tenants", d.MetricsTopTenants,
		"Tenants named in the tenant label of per-tenant metrics: the ones with the most in-memory series. The others are counted only in totals, so /metrics stays small and does not list every tenant. 0 names none.")
	f.IntVar(&c.MaxExemplars, "storage.max-exemplars", d.MaxExemplars,
		"Size of each tenant's in-memory exemplar buffer (about 64 bytes per exemplar), allocated whole when the tenant opens. The default 0 disables exemplar storage: exemplars are accepted and dropped.")
	f.IntVar(&c.MaxTenants, "pusher.max-tenants", d.MaxTenants,
		"Most tenants whose TSDB is open for writing at once (each costs memory, file descriptors and goroutines); a write for another tenant is answered SERVER_ERROR with a retry hint, and retried by the consumer, until one closes after -storage.idle-timeout. 0 is unlimited.")
	f.IntVar(&c.MaxSeriesPerTenant, "limits.max-series-per-tenant", d.MaxSeriesPerTenant,
		"Maximum number of in-memory series per tenant; samples that would create more are rejected as a client error. 0 is unlimited.")
	f.IntVar(&c.MaxMetadataPerTenant, "limits.max-metadata-per-tenant", d.MaxMetadataPerTenant,
		"Maximum number of metric families whose metadata is kept per tenant; metadata of further families is dropped. 0 is unlimited.")
	// -limits.creation-grace-period belongs to the pusher's limits, which
	// filter future samples before any backend sees them; the pusher copies
	// its value into CreationGracePeriod so direct users of the store get
	// the same protection.
	c.CreationGracePeriod = d.CreationGracePeriod
	c.PastGracePeriod = d.PastGracePeriod
}

// Validate reports the first invalid setting, naming its flag.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if c.Path == "" {
		bad("-storage.path must not be empty")
	}
	if c.Retention <= 0 {
		bad("-storage.retention must be positive, got %v", c.Retention)
	}
	if c.IdleTimeout < 0 {
		bad("-storage.idle-timeout must not be negative, got %v", c.IdleTimeout)
	}
	switch {
	case c.BlockDuration < time.Millisecond:
		bad("-storage.block-duration must be at least 1ms, got %v", c.BlockDuration)
	case c.BlockDuration%time.Millisecond != 0:
		// TSDB time is in milliseconds; silently truncating would make the
		// block ranges differ from what the operator asked for.
		bad("-storage.block-duration must be a whole number of milliseconds, got %v", c.BlockDuration)
	}
	if c.Retention > 0 && c.BlockDuration > 0 && c.Retention < c.BlockDuration {
		bad("-storage.retention (%v) must not be shorter than -storage.block-duration (%v): blocks would be deleted as soon as they are written", c.Retention, c.BlockDuration)
	}
	if c.OutOfOrderWindow < 0 {
		bad("-storage.out-of-order-window must not be negative, got %v", c.OutOfOrderWindow)
	}
	if c.StripeSize <= 0 || c.StripeSize&(c.StripeSize-1) != 0 {
		bad("-storage.stripe-size must be a positive power of two, got %d", c.StripeSize)
	}
	if n := c.HeadChunksWriteBufferSize; n < chunks.MinWriteBufferSize || n > chunks.MaxWriteBufferSize || n%1024 != 0 {
		bad("-storage.head-chunks-write-buffer-size must be a multiple of 1024 from %d to %d, got %d", chunks.MinWriteBufferSize, chunks.MaxWriteBufferSize, n)
	}
	if c.SyncConcurrency < 0 {
		bad("-storage.sync-concurrency must not be negative, got %d", c.SyncConcurrency)
	}
	switch c.SyncMethod {
	case SyncFsync, "":
	case SyncSyncfs:
		if err := syncfsCheck(); err != nil {
			bad("-storage.sync-method=syncfs is not available here: %v; use -storage.sync-method=fsync", err)
		}
	default:
		bad("-storage.sync-method must be %s or %s, got %q", SyncFsync, SyncSyncfs, c.SyncMethod)
	}
	switch c.Tenancy {
	case TenancySeparate, TenancyShared, "":
	default:
		bad("-storage.tenancy must be %s or %s, got %q", TenancySeparate, TenancyShared, c.Tenancy)
	}
	if c.MetricsTopTenants < 0 {
		bad("-storage.metrics-top-tenants must not be negative, got %d", c.MetricsTopTenants)
	}
	if c.MaxExemplars < 0 {
		bad("-storage.max-exemplars must not be negative, got %d", c.MaxExemplars)
	}
	if c.MaxSeriesPerTenant < 0 {
		bad("-limits.max-series-per-tenant must not be negative, got %d", c.MaxSeriesPerTenant)
	}
	if c.MaxMetadataPerTenant < 0 {
		bad("-limits.max-metadata-per-tenant must not be negative, got %d", c.MaxMetadataPerTenant)
	}
	if c.CreationGracePeriod < 0 {
		bad("-limits.creation-grace-period must not be negative, got %v", c.CreationGracePeriod)
	}
	if c.PastGracePeriod < 0 {
		bad("-limits.past-grace-period must not be negative, got %v", c.PastGracePeriod)
	}
	if c.MaxTenants < 0 {
		bad("-pusher.max-tenants must not be negative, got %d", c.MaxTenants)
	}
	return errors.Join(errs...)
}

// shared reports whether every tenant is kept in one TSDB.
func (c *Config) shared() bool { return c.Tenancy == TenancyShared }

// maxBlockDuration is the largest block compaction may produce. Like
// Prometheus, a tenth of the retention, at most 31 days, so that retention
// can delete data in steps of about 10% instead of whole huge blocks.
func (c *Config) maxBlockDuration() time.Duration {
	maxDur := min(c.Retention/10, 31*24*time.Hour)
	return max(maxDur, c.BlockDuration)
}
