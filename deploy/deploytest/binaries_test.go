package deploytest

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	consumerapp "github.com/ferrylabs/ferry/consumer/app"
	gatewayapp "github.com/ferrylabs/ferry/gateway/app"
	pusherapp "github.com/ferrylabs/ferry/pusher/app"
)

// pendingBinaries are binaries the deployment files already run but this
// branch does not build yet. PENDING, for the lead to empty at merge: add
// ferry-gateway to binaries below with its real Config and delete it here.
// Their command lines are parsed by the flags listed, all as strings.
var pendingBinaries = map[string]pendingBinary{}

// pendingFlags are flags being added to existing binaries in parallel
// branches. PENDING, for the lead to empty at merge: the test fails once a
// binary defines one of them, so the list cannot go stale.
var pendingFlags = map[string][]string{}

// pendingFlagValues are values of existing flags that only pending code
// accepts; a command line using one is parsed but not validated.
var pendingFlagValues = map[string]string{}

type pendingBinary struct {
	listen []string
	flags  map[string]string
}

// binary is one Ferry command as a deployment file runs it.
type binary struct {
	// config registers the real flags and validates them.
	config interface {
		RegisterFlags(f *flag.FlagSet)
		Validate() error
	}
	// listen are the flags holding addresses the binary listens on.
	listen []string
	// writes returns the directories the binary, so configured, writes.
	writes func(fs *flag.FlagSet) []string
	// external: the flag set lives in a main package; parse by running
	// the built binary (with -h after the arguments).
	external bool
}

// binaries returns a fresh configuration for every Ferry binary the image
// builds: every directory under services/.
func binaries(t *testing.T, name string) (binary, bool) {
	t.Helper()
	switch name {
	case "ferry-consumer":
		return binary{config: &consumerapp.Config{}, listen: []string{"http.listen-address"}}, true
	case "ferry-pusher":
		return binary{config: &pusherapp.Config{}, listen: []string{"http.listen-address", "grpc.listen-address"}, writes: pusherWrites}, true
	case "ferry-gateway":
		return binary{config: &gatewayapp.Config{}, listen: []string{"http.listen-address"}}, true
	case "ferry-loadgen":
		return binary{external: true}, true
	}
	return binary{}, false
}

// pusherWrites: only the TSDB backend writes, to -storage.path.
func pusherWrites(fs *flag.FlagSet) []string {
	if fs.Lookup("pusher.backend").Value.String() != pusherapp.BackendTSDB {
		return nil
	}
	return []string{fs.Lookup("storage.path").Value.String()}
}

// parsedCommand is a command line a deployment file gives a Ferry binary,
// parsed by that binary's flag set.
type parsedCommand struct {
	name    string
	flags   *flag.FlagSet
	ports   map[int]string // listened-on port -> flag
	writes  []string       // directories written
	pending bool           // uses a pending binary, flag or value
}

// parseCommand parses args with the real flag set of the binary name and
// validates them unless a pending part is involved. An unknown binary fails.
func parseCommand(t *testing.T, name string, args []string) (parsedCommand, error) {
	t.Helper()
	out := parsedCommand{name: name, ports: map[int]string{}}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	b, known := binaries(t, name)
	pb, isPending := pendingBinaries[name]
	switch {
	case known && b.external:
		return out, runExternal(t, name, args)
	case known:
		b.config.RegisterFlags(fs)
	case isPending:
		out.pending = true
		b.listen = pb.listen
		for f, def := range pb.flags {
			fs.String(f, def, "pending")
		}
	default:
		return out, fmt.Errorf("%q is not a Ferry binary this test knows: add it to binaries or pendingBinaries", name)
	}
	for _, f := range pendingFlags[name] {
		if fs.Lookup(f) != nil && known {
			return out, fmt.Errorf("%s now defines -%s: remove it from pendingFlags", name, f)
		}
		if fs.Lookup(f) == nil {
			fs.String(f, "", "pending")
		}
	}
	if err := fs.Parse(args); err != nil {
		return out, fmt.Errorf("%s %q: %w", name, args, err)
	}
	if fs.NArg() > 0 {
		return out, fmt.Errorf("%s: unexpected arguments %q", name, fs.Args())
	}
	for _, a := range args {
		if _, ok := pendingFlagValues[a]; ok {
			out.pending = true
		}
		for _, f := range pendingFlags[name] {
			if strings.HasPrefix(a, "-"+f+"=") {
				out.pending = true
			}
		}
	}
	if !out.pending {
		if err := b.config.Validate(); err != nil {
			return out, fmt.Errorf("%s %q: %w", name, args, err)
		}
	}
	for _, f := range b.listen {
		addr := fs.Lookup(f).Value.String()
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return out, fmt.Errorf("%s -%s=%q: %w", name, f, addr, err)
		}
		var p int
		if _, err := fmt.Sscan(port, &p); err != nil {
			return out, fmt.Errorf("%s -%s=%q: port: %w", name, f, addr, err)
		}
		out.ports[p] = f
	}
	if b.writes != nil {
		out.writes = b.writes(fs)
	}
	out.flags = fs
	return out, nil
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// runExternal parses args with a built binary's own flag parsing: "-h"
// after them makes it exit 0 once every argument parsed, 2 on a bad one.
func runExternal(t *testing.T, name string, args []string) error {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "ferry-deploytest-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", buildDir+"/", "./services/ferry-loadgen")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		return buildErr
	}
	out, err := exec.Command(filepath.Join(buildDir, name), append(append([]string{}, args...), "-h")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %q: %w\n%s", name, args, err, out)
	}
	return nil
}

// repoRoot is the module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}
