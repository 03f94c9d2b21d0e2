package opsserver

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/statuspage"
)

// get returns the status code and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestPprofIsServedOnlyWhenEnabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		enabled bool
		want    int
	}{
		{"should not serve profiles by default", false, http.StatusNotFound},
		{"should serve profiles with -server.enable-pprof", true, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := defaults()
			cfg.EnablePprof = tc.enabled
			s := start(t, cfg)
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
				if code, _ := get(t, "http://"+s.Addr()+path); code != tc.want {
					t.Errorf("GET %s: %d, want %d", path, code, tc.want)
				}
			}
		})
	}
}

func TestStatusPageIsServedAtTheRootOnly(t *testing.T) {
	t.Parallel()
	s := start(t, defaults())
	s.HandleStatus(func() statuspage.Page { return statuspage.Page{Title: "ferry-test-process"} })
	if code, body := get(t, "http://"+s.Addr()+"/"); code != http.StatusOK || !strings.Contains(body, "ferry-test-process") {
		t.Errorf("GET /: %d %q", code, body)
	}
	if code, _ := get(t, "http://"+s.Addr()+"/nothing-here"); code != http.StatusNotFound {
		t.Errorf("GET /nothing-here: %d, want 404", code)
	}
}
