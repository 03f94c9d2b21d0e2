package deploytest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadCompose parses the stack with the Compose specification's own
// loader, schema validation and consistency checks on.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := filepath.Join(repoRoot(t), "deploy", "compose")
	file := filepath.Join(dir, "docker-compose.yml")
	body, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(ctx, types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: file, Content: body}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName("ferry", true)
		o.ResolvePaths = true
	})
	if err != nil {
		t.Fatalf("compose: %v", err)
	}
	return p
}

func TestComposeStackMatchesTheBinaries(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	df := parseDockerfile(t)
	root := repoRoot(t)
	var built bool
	for name, s := range p.Services {
		if s.Build != nil {
			built = true
			if s.Image != imageName+":dev" || s.Build.Context != root || s.Build.Dockerfile != "deploy/compose/Dockerfile" {
				t.Errorf("service %s builds %q from %s/%s; want %s:dev from the repository root and deploy/compose/Dockerfile", name, s.Image, s.Build.Context, s.Build.Dockerfile, imageName)
			}
		}
		if len(s.Command) == 0 || !strings.HasPrefix(s.Command[0], "ferry-") {
			if strings.HasPrefix(s.Image, imageName+":") {
				t.Errorf("service %s runs the Ferry image without a Ferry command", name)
			}
			continue
		}
		if s.Image != imageName+":dev" {
			t.Errorf("service %s runs %s from image %q, not the %s:dev the Dockerfile builds", name, s.Command[0], s.Image, imageName)
		}
		cmd, err := parseCommand(t, s.Command[0], s.Command[1:])
		if err != nil {
			t.Errorf("service %s: %v", name, err)
			continue
		}
		for _, port := range s.Ports {
			if _, ok := cmd.ports[int(port.Target)]; !ok {
				t.Errorf("service %s publishes port %d, which %s does not listen on (%v)", name, port.Target, cmd.name, cmd.ports)
			}
		}
		checkComposeWritable(t, name, s, cmd, df)
	}
	if !built {
		t.Error("no service builds the Ferry image")
	}
	checkScrapeTargets(t, p)
}

// checkComposeWritable: every directory the binary writes is on a named
// volume mounted where the image has a directory owned by its user (Docker
// copies that ownership into a new volume); a bind mount or a volume on a
// directory the image lacks would be root-owned.
func checkComposeWritable(t *testing.T, name string, s types.ServiceConfig, cmd parsedCommand, df dockerfile) {
	t.Helper()
	for _, dir := range cmd.writes {
		var mount *types.ServiceVolumeConfig
		for i, v := range s.Volumes {
			if dir == v.Target || strings.HasPrefix(dir, strings.TrimSuffix(v.Target, "/")+"/") {
				mount = &s.Volumes[i]
			}
		}
		if mount == nil || mount.ReadOnly || mount.Type != types.VolumeTypeVolume {
			t.Errorf("service %s: %s writes %s, which is on no writable named volume", name, cmd.name, dir)
			continue
		}
		var owned bool
		for _, d := range df.owned {
			owned = owned || d == strings.TrimSuffix(mount.Target, "/")
		}
		if !owned {
			t.Errorf("service %s: volume %s is mounted on %s, which the Dockerfile does not create owned by %d:%d: the volume would be root-owned and %s could not write %s",
				name, mount.Source, mount.Target, df.uid, df.gid, cmd.name, dir)
		}
	}
}

// checkScrapeTargets: the stack's Prometheus scrapes every Ferry process
// that serves metrics, on the port its flags give it.
func checkScrapeTargets(t *testing.T, p *types.Project) {
	t.Helper()
	cfg := loadPrometheusConfig(t)
	targets := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			for _, tg := range s.Targets {
				targets[tg] = true
			}
		}
	}
	for name, s := range p.Services {
		if len(s.Command) == 0 || !strings.HasPrefix(s.Command[0], "ferry-") {
			continue
		}
		cmd, err := parseCommand(t, s.Command[0], s.Command[1:])
		if err != nil {
			continue // reported above
		}
		for port, f := range cmd.ports {
			if f != "http.listen-address" {
				continue
			}
			if tg := net.JoinHostPort(name, strconv.Itoa(port)); !targets[tg] {
				t.Errorf("Prometheus does not scrape %s (%s's metrics)", tg, cmd.name)
			}
		}
	}
	if len(cfg.RemoteWrite) != 1 || cfg.RemoteWrite[0].URL != "http://gateway:8090/api/v1/push" {
		t.Errorf("Prometheus must remote-write to the gateway, http://gateway:8090/api/v1/push")
	}
}
