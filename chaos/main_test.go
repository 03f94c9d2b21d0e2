package chaos

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// scale sizes the tests. The default keeps the package to a few minutes on
// two cores; FERRY_CHAOS=large is the soak run of `make chaos`.
type scale struct {
	name string

	killRecords    int           // TestConsumersSIGKILLedAtRandomMoments
	killProduceFor time.Duration // how long its producer runs
	consumerKills  int

	pusherKillRecords int // TestPusherSIGKILLedMidRun
	pusherKills       int

	errorWindow time.Duration // TestPusherServerErrorsForTenSeconds

	brokerRecords int // TestBrokerRestartMidRun
	brokerDown    time.Duration

	shutdownRecords int // TestGracefulShutdownWithSlowPusher

	clusterClients int           // TestClusterBrokerLossUnderRemoteWriteLoad
	clusterOutage  time.Duration // how long the second broker stays stopped

	rwPushersRecords    int           // TestRemoteWritePusherSIGKILLedBehindOneName
	rwPushersProduceFor time.Duration // how long its producer runs
}

func currentScale() scale {
	if os.Getenv("FERRY_CHAOS") == "large" {
		return scale{
			name:        "large",
			killRecords: 100_000, killProduceFor: 60 * time.Second, consumerKills: 10,
			pusherKillRecords: 50_000, pusherKills: 4,
			errorWindow:   10 * time.Second,
			brokerRecords: 40_000, brokerDown: 10 * time.Second,
			shutdownRecords: 4_000,
			clusterClients:  8, clusterOutage: 30 * time.Second,
			rwPushersRecords: 60_000, rwPushersProduceFor: 30 * time.Second,
		}
	}
	return scale{
		name:        "default",
		killRecords: 20_000, killProduceFor: 15 * time.Second, consumerKills: 4,
		pusherKillRecords: 12_000, pusherKills: 2,
		errorWindow:   4 * time.Second,
		brokerRecords: 8_000, brokerDown: 4 * time.Second,
		shutdownRecords: 2_000,
		clusterClients:  4, clusterOutage: 10 * time.Second,
		rwPushersRecords: 12_000, rwPushersProduceFor: 10 * time.Second,
	}
}

// outcome is what one test proved, for its summary line and the totals.
type outcome struct {
	name           string
	produced       int64
	delivered      int64 // distinct records found at the pusher
	lost           int64
	duplicates     int64 // requests applied more than once
	consumerKills  int
	pusherKills    int
	brokerRestarts int
	extra          string
}

var totals struct {
	mu sync.Mutex
	outcome
	tests []string
}

// report logs a test's summary line, prints it to stdout so that it shows
// without -v too, and adds it to the totals.
func report(t testing.TB, o outcome) {
	line := fmt.Sprintf("chaos: %s produced=%d delivered=%d lost=%d duplicates=%d consumer_kills=%d pusher_kills=%d broker_restarts=%d",
		o.name, o.produced, o.delivered, o.lost, o.duplicates, o.consumerKills, o.pusherKills, o.brokerRestarts)
	if o.extra != "" {
		line += " " + o.extra
	}
	t.Log(line)
	fmt.Println(line)
	totals.mu.Lock()
	defer totals.mu.Unlock()
	totals.produced += o.produced
	totals.delivered += o.delivered
	totals.lost += o.lost
	totals.duplicates += o.duplicates
	totals.consumerKills += o.consumerKills
	totals.pusherKills += o.pusherKills
	totals.brokerRestarts += o.brokerRestarts
	totals.tests = append(totals.tests, o.name)
}
