package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/ferrylabs/ferry/consumer/lane"
	"github.com/ferrylabs/ferry/internal/backoff"
	"github.com/ferrylabs/ferry/internal/tlsreload"
	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// ErrNoStream is the error of a request that found no stream to the
// pusher open within a second: its lane sends it again after a backoff.
var ErrNoStream = errors.New("consumer: no stream to the pusher")

// sender owns the one bidirectional stream to the pusher: it is the lanes'
// lane.Sender. A background loop (run, in this file) keeps a stream open;
// Send sends a request on it, and its call waits for the answer with the
// same request ID (stream.go). When the stream breaks, every request
// waiting on it fails and its lane resends it on the next stream, in order.
//
// The stream is PushBatch, whose messages carry the requests queued when
// one is written (see batchWriter), unless the bounds ask for Push or the
// pusher does not know PushBatch: then each request is a message of a
// Push stream.
type sender struct {
	topic   string
	addr    string
	creds   credentials.TransportCredentials
	nextID  atomic.Uint64
	conn    *grpc.ClientConn
	client  ferryv1.PusherServiceClient
	logger  *slog.Logger
	backoff backoff.Policy
	bounds  messageBounds
	// pushOnly is set once the pusher answered PushBatch UNIMPLEMENTED:
	// the sender uses Push from then on.
	pushOnly atomic.Bool

	mu      sync.Mutex
	cur     *stream
	changed chan struct{} // closed and replaced when cur changes
	ready   atomic.Bool
	// openErr is why the last stream failed to open, for Ready.
	openErr atomic.Pointer[error]
}

func newSender(addr, topic string, bounds messageBounds, tlsCfg tlsreload.Client, bo backoff.Policy, logger *slog.Logger, opts ...grpc.DialOption) (*sender, error) {
	creds, err := tlsCfg.Credentials()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		tlsCfg.Authority(),
		codec.DialOption(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16 << 20)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("pusher client for %s: %w", addr, err)
	}
	return &sender{
		topic:   topic,
		addr:    addr,
		creds:   creds,
		conn:    conn,
		client:  ferryv1.NewPusherServiceClient(conn),
		logger:  logger,
		backoff: bo,
		bounds:  bounds,
		changed: make(chan struct{}),
	}, nil
}

// run keeps a stream open until ctx is done, reopening it with backoff
// after every break.
func (s *sender) run(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; {
		st, err := s.open(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			err = s.explain(ctx, err)
			delay := s.backoff.Delay(attempt, 0)
			// Logged before Ready can report it, so that an operator who
			// sees the cause in /ready finds it in the logs too.
			s.logger.Warn("pusher unreachable: retrying", "err", err, "retry_in", delay.Round(time.Millisecond))
			s.openErr.Store(&err)
			attempt++
			sleep(ctx, delay)
			continue
		}
		if attempt > 0 {
			s.logger.Info("stream to the pusher open")
		}
		attempt = 0
		s.setCurrent(st)
		go s.receive(st)
		<-st.done(ctx)
		s.setCurrent(nil)
	}
}

// explain adds the pusher's TLS verdict to a failure to open the stream
// when gRPC's own error does not carry it (see tlsreload.Probe).
func (s *sender) explain(ctx context.Context, err error) error {
	if status.Code(err) != codes.Unavailable {
		return err
	}
	perr := tlsreload.Probe(ctx, s.creds, s.addr)
	if perr == nil || strings.Contains(err.Error(), perr.Error()) {
		return err
	}
	return fmt.Errorf("%w (TLS to the pusher: %w)", err, perr)
}

// open opens a PushBatch stream, or a Push stream when the bounds ask for
// one or the pusher does not serve PushBatch.
func (s *sender) open(ctx context.Context) (*stream, error) {
	if s.bounds.requests > 0 && !s.pushOnly.Load() {
		st, err := s.openStream(ctx, pushBatchDesc)
		if status.Code(err) != codes.Unimplemented {
			return st, err
		}
		s.pushOnly.Store(true)
		s.logger.Warn("the pusher does not serve PushBatch (an older version): sending one request per message on Push", "err", err)
	}
	return s.openStream(ctx, pushDesc)
}

// The two streams of ferry.v1.PusherService. The sender opens them itself
// rather than through the generated client: it writes wire.PushRequest
// and wire.PushBatch, record values as they came, which the generated
// stream types do not take.
var (
	pushDesc      = &grpc.StreamDesc{StreamName: "Push", ServerStreams: true, ClientStreams: true}
	pushBatchDesc = &grpc.StreamDesc{StreamName: "PushBatch", ServerStreams: true, ClientStreams: true}
)

// pusherService is the service's full name, for its method paths.
const pusherService = "/ferry.v1.PusherService/"

// openStream opens the stream of desc and waits for the pusher's headers.
func (s *sender) openStream(ctx context.Context, desc *grpc.StreamDesc) (*stream, error) {
	sctx, cancel := context.WithCancel(ctx)
	cs, err := s.conn.NewStream(sctx, desc, pusherService+desc.StreamName)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open stream: %w", err)
	}
	// The stream is only known to work once the server answered its
	// headers. A stream refused at once (an unknown method, a pusher
	// shutting down) has none; gRPC keeps its status for the first read.
	md, err := cs.Header()
	if err == nil && md == nil {
		err = cs.RecvMsg(new(ferryv1.PushBatchResponse))
		if err == nil {
			err = errors.New("answers before the headers")
		}
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open stream %s: %w", desc.StreamName, err)
	}
	st := &stream{s: cs, cancel: cancel, pending: map[uint64]*call{}}
	if desc == pushBatchDesc {
		st.out = newBatchWriter(st, s.bounds)
	}
	return st, nil
}

func (s *sender) setCurrent(st *stream) {
	s.mu.Lock()
	s.cur = st
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	s.ready.Store(st != nil)
}

// sync asks the pusher to make everything acknowledged so far durable, for
// tenants or, when tenants is nil, for every tenant.
func (s *sender) sync(ctx context.Context, tenants []string) error {
	if _, err := s.client.Sync(ctx, &ferryv1.SyncRequest{Tenants: tenants}); err != nil {
		return fmt.Errorf("pusher sync: %w", err)
	}
	return nil
}

func (s *sender) close() error {
	s.mu.Lock()
	st := s.cur
	s.mu.Unlock()
	if st != nil {
		st.fail(errors.New("consumer: closing"))
	}
	return s.conn.Close()
}

// pending returns the number of requests on the open stream waiting for
// their answers.
func (s *sender) pending() int {
	s.mu.Lock()
	st := s.cur
	s.mu.Unlock()
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.pending)
}

// sleep waits for d or until ctx is done.
var sleep = lane.Sleep
