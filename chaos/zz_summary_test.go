package chaos

import (
	"fmt"
	"strings"
	"testing"
)

// TestZZSummary prints the totals of every chaos test that ran before it.
// Go runs a package's tests in file order and this file sorts last;
// kafkatest.Main exits the process right after the tests, so TestMain has
// no place to print it. It also removes the binaries built for the run.
func TestZZSummary(t *testing.T) {
	defer removeBinaries()
	totals.mu.Lock()
	defer totals.mu.Unlock()
	if len(totals.tests) == 0 {
		t.Skip("no chaos test ran")
	}
	line := fmt.Sprintf("chaos: scale=%s tests=%d produced=%d delivered=%d lost=%d duplicates=%d consumer_kills=%d pusher_kills=%d broker_restarts=%d",
		currentScale().name, len(totals.tests), totals.produced, totals.delivered, totals.lost, totals.duplicates,
		totals.consumerKills, totals.pusherKills, totals.brokerRestarts)
	t.Logf("%s (%s)", line, strings.Join(totals.tests, ", "))
	fmt.Println(line)
	if totals.lost != 0 {
		t.Errorf("%d records lost across the chaos tests", totals.lost)
	}
}
