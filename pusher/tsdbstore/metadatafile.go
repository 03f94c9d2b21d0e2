package tsdbstore

// Metric metadata (type, help, unit per metric family) is kept per tenant
// in a small JSON file in the tenant's directory, so that it survives a
// restart. Sync writes the file of every tenant whose metadata changed,
// atomically (temporary file, fsync, rename, directory fsync), before it
// returns; the consumer commits offsets only after Sync, so metadata is as
// durable as samples when a record is acknowledged. A tenant's file is
// read on the first use of its metadata.
//
// Why a file and not the WAL's metadata records: the TSDB keeps metadata
// per series, not per metric family, only for series in the head (it is
// gone once a series is compacted out), and writing it needs an appender
// on the tenant's TSDB, which a metadata-only push deliberately does not
// open. A file per tenant holds exactly what /api/v1/metadata serves, is
// bounded by -limits.max-metadata-per-tenant, and is rewritten only when
// a family's metadata changes, which is rare (senders resend the same
// metadata every minute).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// metadataFileName is the file in a tenant's directory.
const metadataFileName = "metadata.json"

// metadataFileVersion is the format of the file; a reader refuses others.
const metadataFileVersion = 1

// metadataFiles tracks which tenants' files were read and which changed
// since they were last written. Its maps are guarded by metadataStore.mu.
type metadataFiles struct {
	loaded  map[string]bool   // tenant's file was read into metadataStore.byTenant
	changed map[string]uint64 // tenant -> generation of its metadata in memory
	written map[string]uint64 // tenant -> generation last written to its file

	// writeMu serializes writers (Sync, Close) so that two never write one
	// tenant's temporary file at once, and generations are recorded in
	// order. It is taken before metadataStore.mu, never while holding it.
	writeMu sync.Mutex
}

// metadataFileContent is the file's JSON.
type metadataFileContent struct {
	Version  int                  `json:"version"`
	Metadata []metadataFileFamily `json:"metadata"`
}

type metadataFileFamily struct {
	Family string `json:"metric_family_name"`
	Type   string `json:"type"` // prompb enum name, e.g. METRIC_TYPE_COUNTER
	Help   string `json:"help,omitempty"`
	Unit   string `json:"unit,omitempty"`
}

// loadLocked merges the tenant's file into ms.byTenant on the tenant's
// first use; entries already in memory are newer and win. ms.mu must be
// held.
func (ms *metadataStore) loadLocked(tenant string) {
	f := &ms.files
	if f.loaded[tenant] {
		return
	}
	if f.loaded == nil {
		f.loaded = map[string]bool{}
	}
	f.loaded[tenant] = true
	if validateTenant(tenant) != nil {
		return // Never used as a path; nothing can have been stored.
	}
	path := filepath.Join(ms.root, tenant, metadataFileName)
	stored, err := readMetadataFile(path)
	if err != nil {
		// Senders resend metadata periodically, so the tenant recovers on
		// its own; the file is replaced at the next change.
		ms.logger.Error("reading metric metadata; starting with none", "tenant", tenant, "path", path, "err", err)
		return
	}
	if len(stored) == 0 {
		return
	}
	m := ms.byTenant[tenant]
	if m == nil {
		m = make(map[string]prompb.MetricMetadata, len(stored))
		ms.byTenant[tenant] = m
	}
	for name, md := range stored {
		if _, ok := m[name]; !ok {
			m[name] = md
		}
	}
}

// changedLocked records that the tenant's metadata differs from its file.
// ms.mu must be held.
func (ms *metadataStore) changedLocked(tenant string) {
	if ms.files.changed == nil {
		ms.files.changed = map[string]uint64{}
	}
	ms.files.changed[tenant]++
}

// persist writes the file of every tenant whose metadata changed since it
// was last written.
func (ms *metadataStore) persist() error {
	f := &ms.files
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	type job struct {
		tenant string
		gen    uint64
		mds    map[string]prompb.MetricMetadata
	}
	var jobs []job
	ms.mu.Lock()
	for tenant, gen := range f.changed {
		if gen != f.written[tenant] {
			jobs = append(jobs, job{tenant, gen, maps.Clone(ms.byTenant[tenant])})
		}
	}
	ms.mu.Unlock()

	var errs []error
	for _, j := range jobs {
		if err := ms.writeFile(j.tenant, j.mds); err != nil {
			errs = append(errs, fmt.Errorf("write metric metadata of tenant %q: %w", j.tenant, err))
			continue
		}
		ms.mu.Lock()
		if f.written == nil {
			f.written = map[string]uint64{}
		}
		f.written[j.tenant] = j.gen
		ms.mu.Unlock()
	}
	return errors.Join(errs...)
}

// writeFile replaces the tenant's file atomically and durably.
func (ms *metadataStore) writeFile(tenant string, mds map[string]prompb.MetricMetadata) error {
	dir := filepath.Join(ms.root, tenant)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		// A metadata-only tenant has no directory yet.
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
		if err := syncDir(ms.root); err != nil {
			return fmt.Errorf("fsync store directory: %w", err)
		}
	}
	content := metadataFileContent{Version: metadataFileVersion, Metadata: make([]metadataFileFamily, 0, len(mds))}
	for _, name := range slices.Sorted(maps.Keys(mds)) {
		md := mds[name]
		content.Metadata = append(content.Metadata, metadataFileFamily{
			Family: name, Type: md.Type.String(), Help: md.Help, Unit: md.Unit,
		})
	}
	data, err := json.Marshal(content)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, metadataFileName+".tmp")
	if err := writeFileSync(tmp, data); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, metadataFileName)); err != nil {
		return err
	}
	return syncDir(dir)
}

// writeFileSync writes data to path and fsyncs it before closing.
func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// readMetadataFile reads a tenant's file; a missing file is no metadata.
func readMetadataFile(path string) (map[string]prompb.MetricMetadata, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var content metadataFileContent
	if err := json.Unmarshal(data, &content); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if content.Version != metadataFileVersion {
		return nil, fmt.Errorf("unknown format version %d, want %d", content.Version, metadataFileVersion)
	}
	out := make(map[string]prompb.MetricMetadata, len(content.Metadata))
	for _, fam := range content.Metadata {
		typ, ok := prompb.MetricMetadata_MetricType_value[fam.Type]
		if !ok || fam.Family == "" {
			return nil, fmt.Errorf("invalid entry %q of type %q", fam.Family, fam.Type)
		}
		out[fam.Family] = prompb.MetricMetadata{
			Type:             prompb.MetricMetadata_MetricType(typ),
			MetricFamilyName: fam.Family,
			Help:             fam.Help,
			Unit:             fam.Unit,
		}
	}
	return out, nil
}
