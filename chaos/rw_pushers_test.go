package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// TestRemoteWritePusherSIGKILLedBehindOneName runs two stateless
// ferry-pusher processes with the remote-write backend to one receiver,
// behind one name: a TCP proxy that, like a Kubernetes Service or a DNS
// name with several addresses, sends each new connection to a live
// replica (round-robin, skipping those that refuse). Every consumer's
// -pusher.address is the proxy. Under steady load one pusher is SIGKILLed
// and never comes back: the consumers whose streams it carried see them
// break, reconnect through the name, land on the other pusher and go on.
// At the end every produced sample has reached the receiver (none lost;
// duplicates, from requests resent after the broken streams, are allowed
// and counted), and every partition is committed to its end.
//
// The receiver is the test's own: it counts every sample it is sent, so a
// duplicate shows, where a Prometheus receiver would silently keep one
// copy of a sample sent twice.
func TestRemoteWritePusherSIGKILLedBehindOneName(t *testing.T) {
	sc := currentScale()
	const partitions, tenants, series = 4, 8, 2
	steps := sc.rwPushersRecords / tenants
	produced := int64(steps * tenants)
	pl := newPipeline(t, partitions, tenants, series)

	recv := newCountingReceiver(t)
	pushers := make([]*proc, 2)
	backends := make([]string, len(pushers))
	for i := range pushers {
		pushers[i] = startNamedPusherProc(t, "pusher-"+strconv.Itoa(i), "-pusher.backend=remote-write", "-remote-write.url="+recv.url)
		backends[i] = pushers[i].grpcAddr
	}
	name := newNameProxy(t, backends)
	cs := pl.startConsumers(name.addr)
	pr := pl.newProducer()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	prodDone := pr.produceInBackground(ctx, 0, steps, sc.rwPushersProduceFor)

	// Kill, a third into the load, the pusher carrying the most streams,
	// once it has answered and while it has requests in flight (the
	// receiver's latency keeps them there): the kill breaks streams with
	// unanswered requests, which the consumers must resend.
	time.Sleep(sc.rwPushersProduceFor / 3)
	victim := 0
	live := name.liveConns()
	for i := range live {
		if live[i] > live[victim] {
			victim = i
		}
	}
	survivor := 1 - victim
	waitFor(t, time.Minute, "the victim to have requests in flight", func() bool {
		m, err := scrape(pushers[victim].httpAddr)
		return err == nil && m.value("ferry_pusher_requests_total", "status", "ok") > 0 && m.value("ferry_pusher_inflight_requests") > 0
	})
	movedStreams := live[victim]
	connsBefore := name.accepted()[survivor]
	pushers[victim].kill()
	t.Logf("at %s: SIGKILLed %s carrying %d of %v connections; received %d samples so far",
		time.Since(start).Round(time.Millisecond), pushers[victim].name, movedStreams, live, recv.total())
	if movedStreams == 0 {
		t.Fatalf("no consumer stream ran through %s: the kill proves nothing", pushers[victim].name)
	}

	if err := <-prodDone; err != nil {
		t.Fatal(err)
	}
	committed := pl.waitCommittedToEnd(3 * time.Minute)
	drained := time.Since(start)

	// A stream that broke with nothing in flight costs no retry and the
	// consumer reopens it at once, unlogged: the proxy, not the consumers,
	// shows the reconnects.
	var streamErrors float64
	for _, c := range cs {
		if !c.running() {
			t.Errorf("%s exited (%v): it must reconnect through the name", c.name, c.exitState())
			continue
		}
		streamErrors += c.mustScrape().value("ferry_consumer_acks_total", "status", "stream_error")
	}
	if streamErrors == 0 {
		t.Errorf("no consumer had a request in flight on a broken stream: the kill hit idle streams only")
	}
	if live := name.liveConns(); live[survivor] != len(cs) || live[victim] != 0 {
		t.Errorf("open connections per pusher at the end: %v, want all %d on %s", live, len(cs), pushers[survivor].name)
	}
	reconnected := name.accepted()[survivor] - connsBefore
	if reconnected < movedStreams {
		t.Errorf("%d connections moved to %s after the kill, want at least the %d the killed pusher carried", reconnected, pushers[survivor].name, movedStreams)
	}
	lost, dupRecords, dupSamples := recv.check(pl.shape, tenants, steps)
	if lost > 0 {
		t.Errorf("%d produced records have samples the receiver never got", lost)
	}
	t.Logf("committed %s after %s; consumers saw %.0f stream errors; %d connections moved to %s; receiver counted %d samples, %d sent more than once",
		formatOffsets(committed), drained.Round(time.Millisecond), streamErrors, reconnected, pushers[survivor].name, recv.total(), dupSamples)
	report(t, outcome{
		name: "rw-pushers/kill", produced: produced, delivered: produced - lost, lost: lost,
		duplicates: dupRecords, pusherKills: 1,
		extra: fmt.Sprintf("pushers=2 moved_streams=%d stream_errors=%.0f duplicate_samples=%d seconds=%.0f",
			movedStreams, streamErrors, dupSamples, drained.Seconds()),
	})
}

// countingReceiver is a remote-write receiver that counts every sample it
// is sent, by tenant (the X-Scope-OrgID header), series and timestamp.
type countingReceiver struct {
	url string

	mu      sync.Mutex
	samples map[string]int
	n       int64
}

// receiverLatency is how long the receiver takes to answer, as a receiver
// across a network does: it keeps the pushers' requests in flight long
// enough for a kill to catch some.
const receiverLatency = 5 * time.Millisecond

// maxReceiverBody bounds what the receiver reads of one request; the
// pushers' requests are a few KiB.
const maxReceiverBody = 64 << 20

func newCountingReceiver(t testing.TB) *countingReceiver {
	r := &countingReceiver{samples: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		compressed, err := io.ReadAll(io.LimitReader(req.Body, maxReceiverBody))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		raw, err := snappy.Decode(nil, compressed)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var wr prompb.WriteRequest
		if err := wr.Unmarshal(raw); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tenant := req.Header.Get("X-Scope-OrgID")
		time.Sleep(receiverLatency)
		r.mu.Lock()
		for _, ts := range wr.Timeseries {
			id := tenant + "|" + labelsString(ts.Labels)
			for _, s := range ts.Samples {
				r.samples[id+"@"+strconv.FormatInt(s.Timestamp, 10)+"="+strconv.FormatFloat(s.Value, 'f', -1, 64)]++
				r.n++
			}
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/api/v1/write"
	return r
}

func labelsString(ls []prompb.Label) string {
	var s string
	for _, l := range ls {
		s += l.Name + "=" + l.Value + ","
	}
	return s
}

// total returns how many samples the receiver was sent.
func (r *countingReceiver) total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// check compares what was received with the load's steps [0, steps) of
// every tenant: lost counts records with a sample never received (or with
// a wrong value, which the key holds), dupRecords records received more
// than once, dupSamples the samples sent beyond the first copy. It also
// counts samples nobody produced as lost, since they mean a mixed-up
// tenant or value.
func (r *countingReceiver) check(shape loadgen.Shape, tenants, steps int) (lost, dupRecords, dupSamples int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := 0
	for i := range tenants {
		tenant := loadgen.Tenant(i)
		for step := range steps {
			req := shape.Request(tenant, step)
			missing, dup := false, false
			for _, ts := range req.Timeseries {
				s := ts.Samples[0]
				n := r.samples[tenant+"|"+labelsString(ts.Labels)+"@"+strconv.FormatInt(s.Timestamp, 10)+"="+strconv.FormatFloat(s.Value, 'f', -1, 64)]
				if n == 0 {
					missing = true
					continue
				}
				seen++
				if n > 1 {
					dup = true
					dupSamples += int64(n - 1)
				}
			}
			if missing {
				lost++
			}
			if dup {
				dupRecords++
			}
		}
	}
	if strays := len(r.samples) - seen; strays > 0 {
		lost += int64(strays)
	}
	return lost, dupRecords, dupSamples
}

// nameProxy stands for a Service or DNS name in front of several replicas:
// it sends each new connection to the next backend, round-robin, skipping
// those that refuse it, and relays bytes until either side closes.
type nameProxy struct {
	addr     string
	backends []string

	mu       sync.Mutex
	next     int
	live     []int
	accepts  []int
	listener net.Listener
}

// proxyDialTimeout bounds the connection attempt to one backend before the
// proxy tries the next.
const proxyDialTimeout = time.Second

func newNameProxy(t testing.TB, backends []string) *nameProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &nameProxy{addr: l.Addr().String(), backends: backends, live: make([]int, len(backends)), accepts: make([]int, len(backends)), listener: l}
	var wg sync.WaitGroup
	var connsMu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		connsMu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		connsMu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			backend, i := p.dial()
			if backend == nil {
				_ = client.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, client, backend)
			connsMu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.relay(client, backend)
				p.mu.Lock()
				p.live[i]--
				p.mu.Unlock()
			}()
		}
	}()
	return p
}

// dial connects to the next backend that accepts, or returns nil when none
// does.
func (p *nameProxy) dial() (net.Conn, int) {
	p.mu.Lock()
	first := p.next
	p.next = (p.next + 1) % len(p.backends)
	p.mu.Unlock()
	for k := range p.backends {
		i := (first + k) % len(p.backends)
		c, err := net.DialTimeout("tcp", p.backends[i], proxyDialTimeout)
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.live[i]++
		p.accepts[i]++
		p.mu.Unlock()
		return c, i
	}
	return nil, -1
}

// relay copies both ways until either side ends, then closes both, as a
// Service's connection ends when its endpoint dies.
func (p *nameProxy) relay(a, b net.Conn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(a, b); done <- struct{}{} }()
	go func() { _, _ = io.Copy(b, a); done <- struct{}{} }()
	<-done
	_ = a.Close()
	_ = b.Close()
	<-done
}

// liveConns returns the open connections per backend.
func (p *nameProxy) liveConns() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.live...)
}

// accepted returns the connections made so far per backend.
func (p *nameProxy) accepted() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.accepts...)
}
