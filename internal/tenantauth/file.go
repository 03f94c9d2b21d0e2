package tenantauth

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"
)

// fileFormat is the YAML of -auth.tenants-file:
//
//	bearer_tokens:
//	  - token: "a long random string"
//	    tenants: [team-a]
//	basic_auth_users:
//	  - username: grafana
//	    password_bcrypt: "$2y$10$..."   # htpasswd -nbBC 10 "" 'password' | cut -d: -f2
//	    tenants: [team-a, team-b]
type fileFormat struct {
	BearerTokens []struct {
		Token   string   `yaml:"token"`
		Tenants []string `yaml:"tenants"`
	} `yaml:"bearer_tokens"`
	BasicAuthUsers []struct {
		Username       string   `yaml:"username"`
		PasswordBcrypt string   `yaml:"password_bcrypt"`
		Tenants        []string `yaml:"tenants"`
	} `yaml:"basic_auth_users"`
}

// credentials is one parsed tenants file.
type credentials struct {
	// tokens maps the SHA-256 of each bearer token to its tenants: a map
	// lookup on a hash leaks nothing useful through its timing.
	tokens map[[sha256.Size]byte][]string
	users  map[string]user
	// standIn is the hash an unknown user's password is checked against:
	// the costliest of the users' hashes, so that refusing an unknown
	// user is never the faster answer. Users of one file should share a
	// cost: a user with a cheaper hash than the others is told apart by
	// its faster refusals. nil when the file has no users.
	standIn []byte
}

type user struct {
	hash    []byte
	tenants []string
}

// parse reads a tenants file; its errors name the entry, never a secret.
func parse(path string, raw []byte) (*credentials, error) {
	var f fileFormat
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, errEOF) {
		return nil, fmt.Errorf("parse %s: %w", path, yamlError(err))
	}
	c := &credentials{tokens: map[[sha256.Size]byte][]string{}, users: map[string]user{}}
	standInCost := 0
	for i, t := range f.BearerTokens {
		if t.Token == "" {
			return nil, fmt.Errorf("%s: bearer_tokens[%d]: empty token", path, i)
		}
		if err := checkTenants(t.Tenants); err != nil {
			return nil, fmt.Errorf("%s: bearer_tokens[%d]: %w", path, i, err)
		}
		sum := sha256.Sum256([]byte(t.Token))
		if _, dup := c.tokens[sum]; dup {
			return nil, fmt.Errorf("%s: bearer_tokens[%d]: the same token is listed twice", path, i)
		}
		c.tokens[sum] = t.Tenants
	}
	for i, u := range f.BasicAuthUsers {
		if u.Username == "" {
			return nil, fmt.Errorf("%s: basic_auth_users[%d]: empty username", path, i)
		}
		if _, err := bcrypt.Cost([]byte(u.PasswordBcrypt)); err != nil {
			return nil, fmt.Errorf("%s: basic_auth_users[%d] (%s): password_bcrypt is not a bcrypt hash", path, i, u.Username)
		}
		if err := checkTenants(u.Tenants); err != nil {
			return nil, fmt.Errorf("%s: basic_auth_users[%d] (%s): %w", path, i, u.Username, err)
		}
		if _, dup := c.users[u.Username]; dup {
			return nil, fmt.Errorf("%s: basic_auth_users[%d]: user %q is listed twice", path, i, u.Username)
		}
		c.users[u.Username] = user{hash: []byte(u.PasswordBcrypt), tenants: u.Tenants}
		if cost, _ := bcrypt.Cost([]byte(u.PasswordBcrypt)); c.standIn == nil || cost > standInCost {
			c.standIn, standInCost = []byte(u.PasswordBcrypt), cost
		}
	}
	return c, nil
}

// yamlLine finds the line numbers in the YAML decoder's messages.
var yamlLine = regexp.MustCompile(`line \d+`)

// yamlError describes a YAML decoding error by its lines and kinds only.
// The decoder's own messages quote the text they stumbled on (the first
// characters of a token given where a list belongs, a token written as a
// key), and this error is logged when a reload fails.
func yamlError(err error) error {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	parts := make([]string, 0, len(msgs))
	for _, m := range msgs {
		where := "somewhere"
		if l := yamlLine.FindString(m); l != "" {
			where = l
		}
		var what string
		switch {
		case te == nil:
			what = "not valid YAML"
		case strings.Contains(m, " not found in type "):
			what = "an unknown field"
		default:
			what = "a value of the wrong type"
		}
		parts = append(parts, where+": "+what)
	}
	return errors.New(strings.Join(parts, "; "))
}

func checkTenants(ts []string) error {
	if len(ts) == 0 {
		return errors.New("no tenants")
	}
	for _, t := range ts {
		if t == "" {
			return errors.New("an empty tenant")
		}
	}
	return nil
}
