package deploytest

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// promConfig is the part of the compose stack's prometheus.yml the tests
// read; promtool checks the whole file.
type promConfig struct {
	ScrapeConfigs []struct {
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
	RemoteWrite []struct {
		URL string `json:"url"`
	} `json:"remote_write"`
}

func loadPrometheusConfig(t *testing.T) promConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "compose", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c promConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	return c
}
