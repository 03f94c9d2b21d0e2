package cli_test

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"

	consumerapp "github.com/ferrylabs/ferry/consumer/app"
	"github.com/ferrylabs/ferry/internal/cli"
	pusherapp "github.com/ferrylabs/ferry/pusher/app"
)

func TestBadCommandLinesFailWithAMessageNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  cli.Config
		args []string
		want string
	}{
		{"should refuse an unknown flag", &consumerapp.Config{}, []string{"-kafka.adress=x:1"}, "-kafka.adress"},
		{"should refuse a negative interval", &consumerapp.Config{}, []string{"-instance-id=consumer-1", "-kafka.commit-interval=-1s"}, "-kafka.commit-interval"},
		{"should refuse an unparsable duration", &consumerapp.Config{}, []string{"-kafka.commit-interval=soon"}, "-kafka.commit-interval"},
		{"should refuse an instance ID without a number", &consumerapp.Config{}, []string{"-instance-id=consumer"}, "-instance-id"},
		{"should refuse an unparsable broker address", &consumerapp.Config{}, []string{"-instance-id=consumer-1", "-kafka.address=kafka"}, "-kafka.address"},
		{"should refuse an unparsable pusher address", &consumerapp.Config{}, []string{"-instance-id=consumer-1", "-pusher.address=::"}, "-pusher.address"},
		{"should refuse stray arguments", &consumerapp.Config{}, []string{"-instance-id=consumer-1", "run"}, "unexpected arguments"},
		{"should refuse an unknown backend", &pusherapp.Config{}, []string{"-pusher.backend=s3"}, "-pusher.backend"},
		{"should refuse an unparsable listen address", &pusherapp.Config{}, []string{"-grpc.listen-address=9095"}, "-grpc.listen-address"},
		{"should refuse a negative retention", &pusherapp.Config{}, []string{"-storage.retention=-1h"}, "-storage.retention"},
		{"should refuse an unknown log level", &pusherapp.Config{}, []string{"-log.level=loud"}, "-log.level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := cli.Parse("test", tc.cfg, tc.args, &stderr)
			if err == nil {
				t.Fatal("Parse accepted the command line")
			}
			if msg := err.Error() + stderr.String(); !strings.Contains(msg, tc.want) {
				t.Fatalf("error %q (stderr %q) does not name %s", err, stderr.String(), tc.want)
			}
		})
	}
}

func TestHelpIsNotAnError(t *testing.T) {
	var stderr bytes.Buffer
	err := cli.Parse("ferry-pusher", &pusherapp.Config{}, []string{"-h"}, &stderr)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "-storage.path") {
		t.Fatalf("Parse -h = %v with output %q; want flag.ErrHelp and the flag list", err, stderr.String())
	}
}

func TestVersionFlagAsksForTheVersionWithoutValidating(t *testing.T) {
	var stderr bytes.Buffer
	// A consumer without -instance-id does not validate: -version must not care.
	err := cli.Parse("ferry-consumer", &consumerapp.Config{}, []string{"-version"}, &stderr)
	if !errors.Is(err, cli.ErrVersion) {
		t.Fatalf("Parse(-version) = %v, want ErrVersion", err)
	}
}
