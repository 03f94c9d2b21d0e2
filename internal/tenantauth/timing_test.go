package tenantauth

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// newTimingAuthenticator loads a file with one user, "grafana", whose
// hash has the given cost.
func newTimingAuthenticator(t *testing.T, cost int) *Authenticator {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("graf-pass"), cost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	yaml := "basic_auth_users: [{username: grafana, password_bcrypt: '" + string(hash) + "', tenants: [a]}]\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{TenantsFile: path}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAnUnknownUserCostsTheSameHashWorkAsAWrongPassword counts the bcrypt
// comparisons each refusal makes through the compareHash seam. Not
// parallel: it replaces a package variable.
func TestAnUnknownUserCostsTheSameHashWorkAsAWrongPassword(t *testing.T) {
	a := newTimingAuthenticator(t, bcrypt.MinCost)
	calls := 0
	compareHash = func(hash, pass []byte) error {
		calls++
		return bcrypt.CompareHashAndPassword(hash, pass)
	}
	t.Cleanup(func() { compareHash = bcrypt.CompareHashAndPassword })
	c := a.current()
	for _, tc := range []struct{ user, pass string }{
		{"nobody", "graf-pass"},
		{"nobody", "wrong"},
		{"grafana", "wrong"},
	} {
		calls = 0
		if _, err := a.checkUser(c, tc.user, tc.pass); !errors.Is(err, errUnauthorized) {
			t.Fatalf("checkUser(%q, %q) = %v, want %v", tc.user, tc.pass, err, errUnauthorized)
		}
		if calls != 1 {
			t.Errorf("checkUser(%q, %q) compared %d hashes, want 1", tc.user, tc.pass, calls)
		}
	}
}

// TestUnknownUsersAndWrongPasswordsTakeTheSameTime measures both refusals
// through the real bcrypt, interleaved so that the machine's load falls
// on both alike, and compares the medians with a generous ratio: before
// the stand-in hash an unknown user was refused about a thousand times
// faster.
func TestUnknownUsersAndWrongPasswordsTakeTheSameTime(t *testing.T) {
	t.Parallel()
	a := newTimingAuthenticator(t, 6)
	c := a.current()
	const tries = 15
	var unknown, wrong []time.Duration
	for range tries {
		start := time.Now()
		_, _ = a.checkUser(c, "nobody", "guess")
		unknown = append(unknown, time.Since(start))
		start = time.Now()
		_, _ = a.checkUser(c, "grafana", "guess")
		wrong = append(wrong, time.Since(start))
	}
	mu, mw := median(unknown), median(wrong)
	if ratio := float64(mu) / float64(mw); ratio < 0.4 || ratio > 2.5 {
		t.Errorf("median refusal: unknown user %v, wrong password %v (ratio %.2f), want within 0.4–2.5", mu, mw, ratio)
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
