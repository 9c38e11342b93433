package session

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore/sqlstoretest"
	"github.com/deskgrid/deskgrid/services/session/store"
)

// A session store that cannot be reached is an outage the caller may retry
// (Unavailable, the cause logged, not sent), not an internal error; what the
// store itself answers (not found) stays what it is. The store is a real
// PostgreSQL one reached through a relay that the test then cuts.
func TestSessionStoreOutageIsUnavailable(t *testing.T) {
	var relay *tcpRelay
	h := newHarness(t, withStore(func(tb testing.TB) store.Store {
		_, dsn := sqlstoretest.Schema(tb, "session_outage_test")
		u, err := url.Parse(dsn)
		if err != nil {
			tb.Fatal(err)
		}
		relay = startRelay(tb, u.Host)
		u.Host = relay.addr
		st, err := store.OpenPostgres(context.Background(), u.String(), nil)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = st.Close() })
		return st
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := h.client.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: "s-aaaaaaaaaaaaaaaaaaaa"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetSession of a missing session with the store up: %v, want NotFound", err)
	}
	relay.cut()
	_, err := h.client.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: "s-aaaaaaaaaaaaaaaaaaaa"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("GetSession with the store down: %v, want Unavailable", err)
	}
	if strings.Contains(err.Error(), relay.addr) {
		t.Fatalf("GetSession with the store down sent the cause: %v", err)
	}
	if _, err := h.client.ListSessions(ctx, &sessionv1.ListSessionsRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("ListSessions with the store down: %v, want Unavailable", err)
	}
	if _, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("CreateSession with the store down: %v, want Unavailable", err)
	}
}

// tcpRelay passes TCP connections on to a server until cut, when it closes
// its listener and every connection: the server is then unreachable.
type tcpRelay struct {
	addr  string
	lis   net.Listener
	mu    sync.Mutex
	conns []net.Conn
	isCut bool
	wg    sync.WaitGroup
}

func startRelay(tb testing.TB, target string) *tcpRelay {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &tcpRelay{addr: lis.Addr().String(), lis: lis}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			r.mu.Lock()
			if r.isCut {
				r.mu.Unlock()
				_, _ = c.Close(), up.Close()
				return
			}
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			r.wg.Add(2)
			go func() { defer r.wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { defer r.wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	tb.Cleanup(r.cut)
	return r
}

func (r *tcpRelay) cut() {
	_ = r.lis.Close()
	r.mu.Lock()
	r.isCut = true
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}
