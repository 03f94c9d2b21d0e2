package kafkaclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const secret = "s3cret-Pa55"

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		env     string
		wantErr string
	}{
		{"the zero config is plaintext and valid", Config{}, "", ""},
		{"should fail for an unknown mechanism", Config{SASLMechanism: "GSSAPI", SASLUsername: "u"}, secret, "-kafka.sasl-mechanism"},
		{"should fail without a user name", Config{SASLMechanism: MechanismPlain}, secret, "-kafka.sasl-username"},
		{"should fail without any password", Config{SASLMechanism: MechanismPlain, SASLUsername: "u"}, "", EnvPassword},
		{"should accept the password from the environment", Config{SASLMechanism: MechanismScramSHA256, SASLUsername: "u"}, secret, ""},
		{"should fail for a missing password file", Config{SASLMechanism: MechanismScramSHA512, SASLUsername: "u", SASLPasswordFile: "/nonexistent/password"}, secret, "-kafka.sasl-password-file"},
		{"should fail for a user without a mechanism", Config{SASLUsername: "u"}, "", "need -kafka.sasl-mechanism"},
		{"should fail for a certificate without its key", Config{TLSEnabled: true, TLSCertPath: "c.pem"}, "", "-kafka.tls-key-path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvPassword, tc.env)
			err := tc.cfg.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate = %v, want an error naming %q", err, tc.wantErr)
			case err != nil && !errors.Is(err, ErrInvalidConfig):
				t.Fatalf("Validate = %v, does not wrap ErrInvalidConfig", err)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Fatalf("the error quotes the password: %v", err)
			}
		})
	}
}

func TestPasswordSources(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		env  string
		want string
	}{
		{"the file wins over the environment", Config{SASLPasswordFile: writeFile(t, "from-file")}, "from-env", "from-file"},
		{"a trailing newline in the file is trimmed", Config{SASLPasswordFile: writeFile(t, "from-file\n")}, "", "from-file"},
		{"the environment is used without a file", Config{}, "from-env", "from-env"},
		{"an explicit Password wins over both", Config{Password: "given", SASLPasswordFile: writeFile(t, "from-file")}, "from-env", "given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvPassword, tc.env)
			tc.cfg.SASLMechanism, tc.cfg.SASLUsername = MechanismPlain, "u"
			got, err := tc.cfg.password()
			if err != nil || got != tc.want {
				t.Fatalf("password() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestSecretsNeverPrint(t *testing.T) {
	t.Parallel()
	cfg := Config{TLSEnabled: true, SASLMechanism: MechanismScramSHA256, SASLUsername: "ferry", Password: secret}
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("config", "kafka", cfg, "password", cfg.Password)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "kafka", cfg, "password", cfg.Password)
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{
		"%v":         fmt.Sprintf("%v", cfg),
		"%+v":        fmt.Sprintf("%+v", cfg),
		"%#v":        fmt.Sprintf("%#v", cfg),
		"%s":         fmt.Sprint(cfg.Password),
		"pointer %v": fmt.Sprintf("%+v", &cfg),
		"slog":       logs.String(),
		"json":       string(js),
	} {
		if strings.Contains(out, secret) {
			t.Errorf("%s prints the password: %s", name, out)
		}
	}
}

func TestFlagsNeverTakeThePassword(t *testing.T) {
	t.Parallel()
	var cfg Config
	f := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(f)
	f.VisitAll(func(fl *flag.Flag) {
		if strings.HasSuffix(fl.Name, "password") {
			t.Errorf("flag -%s takes the password as a value; only a file or the environment may", fl.Name)
		}
	})
}

func TestOpts(t *testing.T) {
	t.Parallel()
	if opts, err := (&Config{}).Opts(); err != nil || len(opts) != 0 {
		t.Fatalf("zero Config: Opts() = %d options, %v; want none", len(opts), err)
	}
	if _, err := (&Config{TLSEnabled: true, TLSCAPath: "/nonexistent/ca.pem"}).Opts(); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
	opts, err := (&Config{TLSEnabled: true, SASLMechanism: MechanismPlain, SASLUsername: "u", Password: secret}).Opts()
	if err != nil || len(opts) != 2 {
		t.Fatalf("TLS and SASL: Opts() = %d options, %v; want 2", len(opts), err)
	}
}
