// Package tenantauth authenticates HTTP callers and checks that the tenant
// they name in X-Scope-OrgID is one they may use. The credentials (bearer
// tokens, or basic-auth users with bcrypt hashes, each mapped to tenants)
// come from a YAML file that is read again when it changes. The query API
// uses it, and so will the gateway.
//
// Without a file nothing is checked: the header is trusted, and the API
// must sit behind a proxy that authenticates callers and sets it.
package tenantauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// TenantHeader names the tenant of a request, as in Cortex, Mimir and
// Thanos.
const TenantHeader = "X-Scope-OrgID"

var errEOF = io.EOF

// Config is the tenant authentication's configuration.
type Config struct {
	TenantsFile string
}

// RegisterFlags registers the flags on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	f.StringVar(&c.TenantsFile, "auth.tenants-file", "", "YAML file of the credentials (bearer tokens, or basic-auth users with bcrypt hashes) allowed on the HTTP API, each with the tenants it may use; re-read when it changes. Empty trusts the "+TenantHeader+" header as sent: then only an authenticating proxy may reach the API.")
}

// Enabled reports whether a tenants file is configured.
func (c *Config) Enabled() bool { return c.TenantsFile != "" }

// Authenticator checks requests against the tenants file.
type Authenticator struct {
	path   string
	logger *slog.Logger

	mu      sync.Mutex
	creds   *credentials
	modTime time.Time
	size    int64
	// verified remembers, per user, the SHA-256 of the last password that
	// matched its bcrypt hash: bcrypt is slow on purpose, and a dashboard
	// sends the same password with every panel's query.
	verified map[string][sha256.Size]byte
	// reloadErr is the last reload error logged, "" after a success.
	reloadErr string
}

// New loads the tenants file, failing if it is missing or invalid.
func New(cfg Config, logger *slog.Logger) (*Authenticator, error) {
	a := &Authenticator{path: cfg.TenantsFile, logger: logger}
	if err := a.reload(); err != nil {
		return nil, fmt.Errorf("-auth.tenants-file: %w", err)
	}
	return a, nil
}

// reload reads the file if its size or modification time changed. On an
// error the credentials loaded before stay in use.
func (a *Authenticator) reload() error {
	st, err := os.Stat(a.path)
	if err != nil {
		return err
	}
	if a.creds != nil && st.ModTime().Equal(a.modTime) && st.Size() == a.size {
		return nil
	}
	raw, err := os.ReadFile(a.path)
	if err != nil {
		return err
	}
	c, err := parse(a.path, raw)
	if err != nil {
		return err
	}
	a.creds, a.modTime, a.size = c, st.ModTime(), st.Size()
	a.verified = map[string][sha256.Size]byte{}
	return nil
}

// current returns the credentials, reloading the file if it changed.
func (a *Authenticator) current() *credentials {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.reload()
	// Logged once per distinct failure: every request would repeat it.
	if err != nil && err.Error() != a.reloadErr {
		a.logger.Error("tenants file not reloaded: keeping the credentials loaded before", "err", err)
	}
	a.reloadErr = ""
	if err != nil {
		a.reloadErr = err.Error()
	}
	return a.creds
}

// tenants returns the tenants of the request's credential, or an error
// saying why it has none.
func (a *Authenticator) tenants(r *http.Request) ([]string, error) {
	c := a.current()
	if user, pass, ok := r.BasicAuth(); ok {
		return a.checkUser(c, user, pass)
	}
	const prefix = "Bearer "
	h := r.Header.Get("Authorization")
	if len(h) > len(prefix) && http.CanonicalHeaderKey(h[:len(prefix)-1]) == "Bearer" {
		if ts, ok := c.tokens[sha256.Sum256([]byte(h[len(prefix):]))]; ok {
			return ts, nil
		}
		return nil, errors.New("unknown bearer token")
	}
	return nil, errors.New("no credential: send a bearer token or basic auth")
}

// errUnauthorized is the one answer to a wrong user name or password:
// which of the two was wrong is not the caller's to learn.
var errUnauthorized = errors.New("unknown user or wrong password")

// compareHash is bcrypt's check; a variable so that a test can count the
// hash work each path does.
var compareHash = bcrypt.CompareHashAndPassword

// checkUser checks a basic-auth user name and password. An unknown user
// costs the same bcrypt work as a known one with a wrong password (the
// password is checked against a stand-in hash and refused whatever the
// result), so the time of a refusal does not tell whether a user exists:
// without it, an unknown user was refused in 0.1 ms and a wrong password
// in 82 ms.
func (a *Authenticator) checkUser(c *credentials, name, pass string) ([]string, error) {
	u, ok := c.users[name]
	if !ok {
		if c.standIn != nil {
			_ = compareHash(c.standIn, []byte(pass))
		}
		return nil, errUnauthorized
	}
	sum := sha256.Sum256([]byte(pass))
	a.mu.Lock()
	last, seen := a.verified[name]
	a.mu.Unlock()
	if seen && subtle.ConstantTimeCompare(last[:], sum[:]) == 1 {
		return u.tenants, nil
	}
	if compareHash(u.hash, []byte(pass)) != nil {
		return nil, errUnauthorized
	}
	a.mu.Lock()
	if a.creds == c {
		a.verified[name] = sum
	}
	a.mu.Unlock()
	return u.tenants, nil
}

// Wrap returns a handler that serves next only for an authenticated caller
// naming one of its tenants: 401 without a valid credential, 403 for a
// tenant it may not use. A credential with a single tenant may omit the
// header; the tenant is then set for next.
func (a *Authenticator) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenants, err := a.tenants(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ferry", Basic realm="ferry"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", err.Error())
			return
		}
		tenant := r.Header.Get(TenantHeader)
		switch {
		case tenant == "" && len(tenants) == 1:
			r = r.Clone(r.Context())
			r.Header.Set(TenantHeader, tenants[0])
		case tenant == "":
			writeError(w, http.StatusBadRequest, "bad_data", fmt.Sprintf("this credential may use several tenants: name one in the %s header", TenantHeader))
			return
		case !slices.Contains(tenants, tenant):
			writeError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("this credential may not use tenant %q", tenant))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeError answers in the Prometheus API's error format, which Grafana
// shows as is.
func writeError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": typ, "error": msg})
}
