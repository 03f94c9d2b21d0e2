package app

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestQueryAPIIsServedOnlyForABackendThatCanBeQueried checks that the
// query API follows backend.Querier: the TSDB store offers it, Discard
// keeps nothing to query and does not.
func TestQueryAPIIsServedOnlyForABackendThatCanBeQueried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		backend string
		want    int
	}{
		{name: "should serve the query API over the tsdb backend", backend: BackendTSDB, want: http.StatusOK},
		{name: "should not serve the query API over the discard backend", backend: BackendDiscard, want: http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startPusher(t, func(c *Config) { c.Backend = tc.backend })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HTTPAddr()+"/api/v1/labels", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Scope-OrgID", "tenant-1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET /api/v1/labels = %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}
