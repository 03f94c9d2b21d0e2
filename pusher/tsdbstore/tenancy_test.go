package tsdbstore

import (
	"os"
	"testing"
)

// testTenancy is the tenancy of the stores the tests make with
// newTestStore: FERRY_TEST_TENANCY, or the default. `make test` runs the
// package once in each, so that every behaviour a test pins down in one
// tenancy holds in the other, except where a test says why it cannot.
var testTenancy = func() string {
	if v := os.Getenv("FERRY_TEST_TENANCY"); v != "" {
		return v
	}
	return DefaultTenancy
}()

// separateOnly skips a test of what only the separate tenancy has: a TSDB
// per tenant, with its own directory, idle close and limits.
func separateOnly(t testing.TB, why string) {
	t.Helper()
	if testTenancy == TenancyShared {
		t.Skipf("not in the shared tenancy: %s", why)
	}
}

// testDB is the directory name of the TSDB holding the tenant's series in
// the tests' tenancy.
func testDB(tenant string) string {
	if testTenancy == TenancyShared {
		return sharedDirName
	}
	return tenant
}
