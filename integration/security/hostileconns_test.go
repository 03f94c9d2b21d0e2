package security

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/internal/testcerts"
	"github.com/ferrylabs/ferry/internal/tlsreload"
	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// hostileConns is how many connections the hostile client keeps open: far
// more than -grpc.max-connections (256).
const hostileConns = 1000

// TestALegitimateCallIsAnsweredWhileAThousandHandshakesHang replays finding
// 3 of issue 31 against the pusher binary with its default flags: 1,000
// connections that never finish their handshake (idle TCP, a partial TLS
// record or HTTP/2 preface, a TLS handshake stopped after its first
// flight) must not lock a legitimate client out. Its PushOne, on a new
// connection, is answered within 2 s, with and without mutual TLS.
func TestALegitimateCallIsAnsweredWhileAThousandHandshakesHang(t *testing.T) {
	ca := testcerts.NewCA(t, "ferry")
	server := ca.Issue(t, "pusher")
	client := ca.Issue(t, "consumer")
	for _, tc := range []struct {
		name string
		args []string
		tls  *tlsreload.Client
	}{
		{"plaintext", nil, nil},
		{"mutual TLS", []string{"-grpc.tls-cert-path=" + server.CertPath, "-grpc.tls-key-path=" + server.KeyPath, "-grpc.tls-client-ca-path=" + ca.CertPath},
			&tlsreload.Client{Enabled: true, CAPath: ca.CertPath, CertPath: client.CertPath, KeyPath: client.KeyPath}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPusherProc(t, tc.args...)
			creds := insecure.NewCredentials()
			if tc.tls != nil {
				c, err := tc.tls.Credentials()
				if err != nil {
					t.Fatal(err)
				}
				creds = c
			}
			if took := pushOneOnANewConnection(t, p.grpcAddr, creds); took > 2*time.Second {
				t.Fatalf("PushOne without hostile connections took %s", took)
			}
			base := p.rss(t)
			openHostileConns(t, p.grpcAddr, tc.tls != nil)
			held := p.rss(t)
			for i := range 3 {
				took := pushOneOnANewConnection(t, p.grpcAddr, creds)
				t.Logf("PushOne %d with %d hostile connections open: answered in %s", i+1, hostileConns, took.Round(time.Millisecond))
				if took > 2*time.Second {
					t.Errorf("PushOne %d took %s with %d hostile connections open, want at most 2s", i+1, took, hostileConns)
				}
			}
			t.Logf("pusher RSS %d MiB at rest, %d MiB with the hostile connections open", base>>20, held>>20)
		})
	}
}

// pushOneOnANewConnection dials addr and calls PushOne with a small
// request, failing the test unless it is answered OK within 10 s; it
// returns how long dialling and the call took.
func pushOneOnANewConnection(t *testing.T, addr string, creds credentials.TransportCredentials) time.Duration {
	t.Helper()
	start := time.Now()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), codec.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sh := loadgen.Shape{Series: 1, StartMs: time.Now().Add(-time.Minute).UnixMilli(), StepMs: 1000}
	resp, err := ferryv1.NewPusherServiceClient(conn).PushOne(ctx, &ferryv1.PushRequest{RequestId: 1, Tenant: "legit", WriteRequest: *sh.Request("legit", 0)}, grpc.WaitForReady(true))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("PushOne after %s: %v", took.Round(time.Millisecond), err)
	}
	if resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Fatalf("PushOne answered %s: %s", resp.Status, resp.Reason)
	}
	return took
}

// openHostileConns opens hostileConns connections to addr that never
// finish their handshake, in turn of four kinds, and closes them when the
// test ends. With tls they speak TLS, else HTTP/2 in plaintext.
func openHostileConns(t *testing.T, addr string, withTLS bool) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i := range hostileConns {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("hostile connection %d: %v", i, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		switch {
		case i%3 == 0: // idle from the start
		case i%3 == 1 && withTLS: // a TLS record header announcing a ClientHello, and no more
			_, _ = conn.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01})
		case i%3 == 1: // half of HTTP/2's preface
			_, _ = conn.Write([]byte("PRI * HTTP/2.0\r\n"))
		case withTLS: // a real ClientHello, then silence while the server answers
			wg.Go(func() { _ = tls.Client(&firstWriteOnly{Conn: conn}, &tls.Config{InsecureSkipVerify: true}).Handshake() })
		default: // a preface cut one byte short
			_, _ = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n"))
		}
	}
	time.Sleep(200 * time.Millisecond) // let the pusher accept them all
	t.Logf("%d hostile connections open", hostileConns)
}

// firstWriteOnly passes its connection's first write and swallows the
// rest, so a TLS handshake sends its ClientHello and never its Finished.
// Only the handshake's goroutine writes.
type firstWriteOnly struct {
	net.Conn
	wrote bool
}

func (c *firstWriteOnly) Write(p []byte) (int, error) {
	if c.wrote {
		return len(p), nil
	}
	c.wrote = true
	return c.Conn.Write(p)
}
