package kafkatest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/testcerts"
)

// SecureUser is the user a [Secure] broker knows for PLAIN, SCRAM-SHA-256
// and SCRAM-SHA-512.
const SecureUser = "ferry"

// Secure is a real Apache Kafka broker with a SASL_SSL listener, for tests
// of TLS and SASL. Its embedded Broker talks to the PLAINTEXT listener, so
// the usual helpers (CreateTopic, EndOffsets, ...) work unchanged.
type Secure struct {
	*Broker
	// SecureAddr is the SASL_SSL listener (host:port).
	SecureAddr string
	// CA signed the broker's certificate; ClientCert is one more
	// certificate it signed, for clients.
	CA         *testcerts.CA
	ClientCert testcerts.Pair
	// Password is SecureUser's password for every mechanism.
	Password string
}

// StartSecure starts a broker of its own with a PLAINTEXT and a SASL_SSL
// listener, certificates made by the test (crypto/x509), SCRAM credentials
// created when its storage is formatted and PLAIN users declared in JAAS.
// It needs Java and Maven: without them the test is skipped, or fails with
// CI=true. FERRY_KAFKA_FAKE skips it too, except with CI=true. The broker
// is stopped when the test ends.
func StartSecure(t testing.TB) *Secure {
	t.Helper()
	ci := envTrue(os.Getenv("CI"))
	if envTrue(os.Getenv(EnvFake)) && !ci {
		t.Skipf("kafkatest: %s asks for no real broker, and kfake has no TLS or SASL", EnvFake)
	}
	if err := realBrokerTools(); err != nil {
		if ci {
			t.Fatalf("kafkatest: a secured broker needs a real Kafka: %v", err)
		}
		t.Skipf("kafkatest: no secured broker: %v", err)
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &Secure{CA: testcerts.NewCA(t, "kafka-test"), Password: randomHex(t)}
	s.ClientCert = s.CA.Issue(t, "client")
	brokerCert := s.CA.Issue(t, "broker")
	keystore := filepath.Join(dir, "broker-keystore.pem")
	writeConcat(t, keystore, brokerCert.KeyPath, brokerCert.CertPath)

	start := time.Now()
	b, ports, err := launch(filepath.Join(root, scriptPath), 3, func(attempt int, ports []int) (string, []string, error) {
		extra := filepath.Join(dir, "secure"+strconv.Itoa(attempt)+".properties")
		if err := os.WriteFile(extra, []byte(s.properties(ports, keystore)), 0o600); err != nil {
			return "", nil, err
		}
		return filepath.Join(dir, "run"+strconv.Itoa(attempt)), []string{
			"KAFKA_EXTRA_CONFIG=" + extra,
			"KAFKA_FORMAT_ARGS=" + s.formatArgs(),
		}, nil
	})
	if err != nil {
		t.Fatalf("kafkatest: the secured broker did not start: %v", err)
	}
	s.SecureAddr = "127.0.0.1:" + strconv.Itoa(ports[2])
	s.Broker = b
	t.Cleanup(func() { b.close(t.Failed()) })
	t.Logf("kafkatest: secured broker: PLAINTEXT %s, SASL_SSL %s (started in %.1fs)", b.addrs[0], s.SecureAddr, time.Since(start).Seconds())
	return s
}

// properties returns the settings appended to kafka.sh's server.properties.
func (s *Secure) properties(ports []int, keystore string) string {
	p, c, sec := ports[0], ports[1], ports[2]
	jaasPlain := fmt.Sprintf(`org.apache.kafka.common.security.plain.PlainLoginModule required user_%s="%s";`, SecureUser, s.Password)
	const jaasScram = `org.apache.kafka.common.security.scram.ScramLoginModule required;`
	return strings.Join([]string{
		"",
		fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d,SASL_SSL://127.0.0.1:%d", p, c, sec),
		fmt.Sprintf("advertised.listeners=PLAINTEXT://127.0.0.1:%d,SASL_SSL://127.0.0.1:%d", p, sec),
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
		"sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
		"listener.name.sasl_ssl.plain.sasl.jaas.config=" + jaasPlain,
		"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=" + jaasScram,
		"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=" + jaasScram,
		"listener.name.sasl_ssl.ssl.keystore.type=PEM",
		"listener.name.sasl_ssl.ssl.keystore.location=" + keystore,
		"listener.name.sasl_ssl.ssl.truststore.type=PEM",
		"listener.name.sasl_ssl.ssl.truststore.location=" + s.CA.CertPath,
		"listener.name.sasl_ssl.ssl.client.auth=requested",
		"",
	}, "\n")
}

// formatArgs creates the SCRAM credentials with the storage.
func (s *Secure) formatArgs() string {
	var args []string
	for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", m, SecureUser, s.Password))
	}
	return strings.Join(args, "\n")
}

// realBrokerTools reports why a real broker cannot be started here.
func realBrokerTools() error {
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not on PATH", tool)
		}
	}
	return nil
}

func randomHex(t testing.TB) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// writeConcat writes the files from, one after the other, to path: a PEM
// keystore holds the key and the certificate chain in one file.
func writeConcat(t testing.TB, path string, from ...string) {
	t.Helper()
	var all []byte
	for _, f := range from {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if err := os.WriteFile(path, all, 0o600); err != nil { //nolint:gosec // a path under the test's own t.TempDir()
		t.Fatal(err)
	}
}
