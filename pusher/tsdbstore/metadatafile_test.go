package tsdbstore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/proto/prompb"
)

func pushMetadata(t *testing.T, s *Store, tenant string, mds ...prompb.MetricMetadata) {
	t.Helper()
	if _, err := s.Push(context.Background(), tenant, &prompb.WriteRequest{Metadata: mds}); err != nil {
		t.Fatal(err)
	}
}

func syncStore(t *testing.T, s *Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

func openAt(t *testing.T, dir string) *Store {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Path = dir
	cfg.IdleTimeout = 0
	s, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	counterMD = prompb.MetricMetadata{MetricFamilyName: "requests_total", Type: prompb.MetricMetadata_METRIC_TYPE_COUNTER, Help: "Requests.", Unit: ""}
	gaugeMD   = prompb.MetricMetadata{MetricFamilyName: "temperature", Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, Help: "Heat.", Unit: "celsius"}
)

func TestMetadataSurvivesRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		close func(t *testing.T, s *Store)
	}{
		// The crash case: Sync made it durable, and nothing else runs
		// (the store is abandoned, not closed, before the reopen).
		{"metadata synced before a crash is there after the restart", func(t *testing.T, s *Store) {
			syncStore(t, s)
			copyDir(t, s.cfg.Path, s.cfg.Path+".crash")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(s.cfg.Path); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(s.cfg.Path+".crash", s.cfg.Path); err != nil {
				t.Fatal(err)
			}
		}},
		{"metadata of a clean shutdown is there after the restart", func(t *testing.T, s *Store) {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "store")
			s := openAt(t, dir)
			pushMetadata(t, s, "t1", counterMD, gaugeMD)
			mustPush(t, s, "t2", &prompb.WriteRequest{
				Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(base), 1)},
				Metadata:   []prompb.MetricMetadata{counterMD},
			})
			tc.close(t, s)

			s = openAt(t, dir)
			defer s.Close()
			got := s.Metadata("t1")
			if len(got) != 2 || got["requests_total"] != counterMD || got["temperature"] != gaugeMD {
				t.Errorf("t1 after restart: %v", got)
			}
			if got := s.Metadata("t2"); len(got) != 1 || got["requests_total"] != counterMD {
				t.Errorf("t2 after restart: %v", got)
			}
			if got := s.Tenants(); len(got) != 1 || got[0] != "t2" {
				t.Errorf("tenants %v: a metadata file must not make a tenant", got)
			}
		})
	}
}

func TestMetadataAfterRestartIsUpdatedByNewPushes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "store")
	s := openAt(t, dir)
	pushMetadata(t, s, "t", counterMD, gaugeMD)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir)
	newer := counterMD
	newer.Help = "Requests served."
	pushMetadata(t, s, "t", newer) // Before anything read the file.
	got := s.Metadata("t")
	if got["requests_total"] != newer || got["temperature"] != gaugeMD {
		t.Errorf("merged metadata %v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir)
	defer s.Close()
	if got := s.Metadata("t"); got["requests_total"] != newer || len(got) != 2 {
		t.Errorf("after second restart %v", got)
	}
}

func TestMetadataFileIsWrittenOnlyWhenMetadataChanges(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, nil)
	path := filepath.Join(s.cfg.Path, "t", metadataFileName)
	pushMetadata(t, s, "t", counterMD)
	syncStore(t, s)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no file after Sync: %v", err)
	}
	// Remove it: a Sync that rewrote unchanged metadata would recreate it.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	pushMetadata(t, s, "t", counterMD) // The sender's periodic resend.
	syncStore(t, s)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("unchanged metadata was rewritten: %v", err)
	}
	pushMetadata(t, s, "t", gaugeMD)
	syncStore(t, s)
	got, err := readMetadataFile(path)
	if err != nil || len(got) != 2 {
		t.Fatalf("file after a change: %v, %v", got, err)
	}
}

func TestMetadataFileErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, content string
	}{
		{"a file that is not JSON is refused", "{not json"},
		{"a file of another version is refused", `{"version":2,"metadata":[]}`},
		{"a file with an unknown type is refused", `{"version":1,"metadata":[{"metric_family_name":"x","type":"METRIC_TYPE_NOPE"}]}`},
		{"a file with an empty family is refused", `{"version":1,"metadata":[{"metric_family_name":"","type":"METRIC_TYPE_GAUGE"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "t"), 0o750); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "t", metadataFileName)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := readMetadataFile(path); err == nil {
				t.Fatal("no error")
			}
			// The store starts with no metadata for the tenant instead of
			// failing, and the next change replaces the file.
			s := openAt(t, dir)
			defer s.Close()
			if got := s.Metadata("t"); len(got) != 0 {
				t.Fatalf("metadata %v", got)
			}
			pushMetadata(t, s, "t", gaugeMD)
			syncStore(t, s)
			if got, err := readMetadataFile(path); err != nil || got["temperature"] != gaugeMD {
				t.Fatalf("replaced file: %v, %v", got, err)
			}
		})
	}
}

func TestMetadataOfInvalidTenantTouchesNoFile(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, nil)
	if err := os.WriteFile(filepath.Join(filepath.Dir(s.cfg.Path), metadataFileName), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"..", "", "a/b"} {
		if got := s.Metadata(tenant); len(got) != 0 {
			t.Errorf("%q: %v", tenant, got)
		}
	}
}
