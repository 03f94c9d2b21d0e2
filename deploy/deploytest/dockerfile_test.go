package deploytest

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// imageName is the image the Dockerfile builds: the compose file tags it
// ferry:dev, the kustomize base sets the tag.
const imageName = "ferry"

// dockerfile is what the tests need from deploy/compose/Dockerfile's
// final stage.
type dockerfile struct {
	uid, gid int64
	// owned are directories copied in with --chown to the runtime user.
	owned []string
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "deploy", "compose", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d dockerfile
	var chowns []struct {
		owner string
		dest  string
	}
	user := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM": // a new stage: only the last one's settings count
			chowns, user = nil, ""
		case "USER":
			user = fields[1]
		case "COPY":
			for _, a := range fields[1:] {
				if owner, ok := strings.CutPrefix(a, "--chown="); ok {
					chowns = append(chowns, struct{ owner, dest string }{owner, fields[len(fields)-1]})
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	u, g, ok := strings.Cut(user, ":")
	uid, err1 := strconv.ParseInt(u, 10, 64)
	gid, err2 := strconv.ParseInt(g, 10, 64)
	if !ok || err1 != nil || err2 != nil || uid == 0 {
		t.Fatalf("Dockerfile: the final stage must set a numeric non-root USER uid:gid (Kubernetes can only verify a numeric one), got %q", user)
	}
	d.uid, d.gid = uid, gid
	for _, c := range chowns {
		if c.owner == user {
			d.owned = append(d.owned, strings.TrimSuffix(c.dest, "/"))
		}
	}
	return d
}

// imageUser returns the uid and gid the image runs as.
func imageUser(t *testing.T) (int64, int64) {
	t.Helper()
	d := parseDockerfile(t)
	return d.uid, d.gid
}

func TestTheImageBuildsEveryServiceAndRunsAsNonRoot(t *testing.T) {
	t.Parallel()
	d := parseDockerfile(t)
	if len(d.owned) == 0 {
		t.Error("Dockerfile: no directory is prepared for the runtime user, so a named volume would be root-owned")
	}
	entries, err := os.ReadDir(filepath.Join(repoRoot(t), "services"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue // services/ also holds the docs test of every service
		}
		if _, ok := binaries(t, e.Name()); !ok && e.Name() != "ferry-dev" {
			t.Errorf("services/%s is built into the image but this package does not know its flags: add it to binaries", e.Name())
		}
	}
	for name := range pendingBinaries {
		if _, err := os.Stat(filepath.Join(repoRoot(t), "services", name)); err == nil {
			t.Errorf("services/%s exists now: move it from pendingBinaries to binaries with its real Config", name)
		}
	}
}
