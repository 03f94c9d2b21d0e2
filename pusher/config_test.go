package pusher

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
)

// parseConfig returns the configuration the flags args give.
func parseConfig(t *testing.T, args ...string) Config {
	t.Helper()
	var cfg Config
	fs := flag.NewFlagSet("pusher", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return cfg
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		// flag is the flag the error must name; "" means valid.
		flag string
	}{
		{name: "should accept the defaults"},
		{name: "should accept a loopback address with port 0", args: []string{"-grpc.listen-address", "127.0.0.1:0"}},
		{name: "should accept a zero creation grace period", args: []string{"-limits.creation-grace-period", "0s"}},
		{name: "should accept the legacy name validation scheme", args: []string{"-limits.name-validation-scheme", "legacy"}},
		{
			name: "should fail if the listen address has no port",
			args: []string{"-grpc.listen-address", "localhost"},
			flag: "-grpc.listen-address",
		},
		{
			name: "should fail if the listen address is empty",
			args: []string{"-grpc.listen-address", ""},
			flag: "-grpc.listen-address",
		},
		{
			name: "should fail if the open streams are zero",
			args: []string{"-grpc.max-open-streams", "0"},
			flag: "-grpc.max-open-streams",
		},
		{
			name: "should fail if the handshake timeout is zero",
			args: []string{"-grpc.handshake-timeout", "0s"},
			flag: "-grpc.handshake-timeout",
		},
		{
			name: "should fail if the connection idle time is negative",
			args: []string{"-grpc.max-connection-idle", "-1s"},
			flag: "-grpc.max-connection-idle",
		},
		{
			name: "should fail if the in-flight limit is zero",
			args: []string{"-pusher.max-inflight-requests", "0"},
			flag: "-pusher.max-inflight-requests",
		},
		{
			name: "should fail if the in-flight limit is negative",
			args: []string{"-pusher.max-inflight-requests", "-1"},
			flag: "-pusher.max-inflight-requests",
		},
		{
			name: "should fail if the request size limit is zero",
			args: []string{"-pusher.max-request-bytes", "0"},
			flag: "-pusher.max-request-bytes",
		},
		{
			name: "should fail if the shutdown timeout is negative",
			args: []string{"-shutdown-timeout", "-1s"},
			flag: "-shutdown-timeout",
		},
		{
			name: "should fail if the shutdown timeout is zero",
			args: []string{"-shutdown-timeout", "0s"},
			flag: "-shutdown-timeout",
		},
		{
			name: "should fail if the labels per series limit is zero",
			args: []string{"-limits.max-labels-per-series", "0"},
			flag: "-limits.max-labels-per-series",
		},
		{
			name: "should fail if the label name length limit is zero",
			args: []string{"-limits.max-label-name-length", "0"},
			flag: "-limits.max-label-name-length",
		},
		{
			name: "should fail if the label value length limit is negative",
			args: []string{"-limits.max-label-value-length", "-5"},
			flag: "-limits.max-label-value-length",
		},
		{
			name: "should fail if the creation grace period is negative",
			args: []string{"-limits.creation-grace-period", "-1m"},
			flag: "-limits.creation-grace-period",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := parseConfig(t, tc.args...)
			err := cfg.Validate()
			if tc.flag == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %s", tc.flag)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Validate() = %v, want it to wrap ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.flag) {
				t.Errorf("Validate() = %q, want it to name %s", err, tc.flag)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg := parseConfig(t)
	if cfg.GRPCListenAddress != ":9095" {
		t.Errorf("default -grpc.listen-address = %q, want :9095", cfg.GRPCListenAddress)
	}
	if cfg.MaxInflight <= 0 || cfg.MaxRequestBytes <= 0 || cfg.ShutdownTimeout <= 0 {
		t.Errorf("defaults must be positive: %+v", cfg)
	}
	// As Prometheus 3, so that OpenTelemetry's names are stored as sent.
	if got := cfg.Limits.NameScheme(); got != model.UTF8Validation {
		t.Errorf("default -limits.name-validation-scheme = %s, want utf8", got)
	}
	if got := parseConfig(t, "-limits.name-validation-scheme=legacy").Limits.NameScheme(); got != model.LegacyValidation {
		t.Errorf("-limits.name-validation-scheme=legacy gave %s", got)
	}
}

func TestFlagsHaveHelp(t *testing.T) {
	t.Parallel()
	var cfg Config
	fs := flag.NewFlagSet("pusher", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if strings.TrimSpace(f.Usage) == "" {
			t.Errorf("flag -%s has no help text", f.Name)
		}
	})
}
