package agent

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/agent/lease"
	"github.com/deskgrid/deskgrid/services/agent/store"
)

// The one error edge: each kind of error becomes its code, and an
// outage's cause (an address, a driver's words) stays in the log.
func TestToStatus(t *testing.T) {
	s := &Service{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	outage := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 5432}, Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"invalid", invalid("prompt is required"), codes.InvalidArgument, "prompt is required"},
		{"run not found", runNotFound("run-1"), codes.NotFound, "run run-1 not found"},
		{"session not found", sessionNotFound("s-1"), codes.NotFound, "session s-1 not found"},
		{"precondition", precondition("run %s is not waiting for approval", "run-1"), codes.FailedPrecondition, "run run-1 is not waiting for approval"},
		{"closing", errClosing, codes.Unavailable, "the agent service is shutting down"},
		{"store: not found", storeErr("read run run-1", fmt.Errorf("%w: run-1", store.ErrNotFound)), codes.NotFound, ""},
		{"store: exists", storeErr("store run", fmt.Errorf("%w: run-1", store.ErrExists)), codes.AlreadyExists, ""},
		{"store: page token", storeErr("list runs", store.ErrInvalidPageToken), codes.InvalidArgument, "page_token is not valid"},
		{"store: deadline", storeErr("read run run-1", fmt.Errorf("query: %w", context.DeadlineExceeded)), codes.DeadlineExceeded, ""},
		{"store: canceled", storeErr("read run run-1", context.Canceled), codes.Canceled, ""},
		{"store: outage", storeErr("read run run-1", fmt.Errorf("read run: %w", outage)), codes.Unavailable, "read run run-1: the run store did not answer; retry shortly"},
		{"store: connection dropped", storeErr("read run run-1", driver.ErrBadConn), codes.Unavailable, "read run run-1: the run store did not answer; retry shortly"},
		{"store: the service's own fault", storeErr("read run run-1", errors.New("sql: database is closed")), codes.Internal, "internal error"},
		{"lease: not held", leaseErr(fmt.Errorf("renew input lease of s-1: %w", lease.ErrNotHolder)), codes.FailedPrecondition, "renew input lease of s-1: input lease not held"},
		{"lease: invalid", leaseErr(lease.ErrInvalid), codes.InvalidArgument, lease.ErrInvalid.Error()},
		{"lease: outage", leaseErr(outage), codes.Unavailable, "input lease: the lease store did not answer; retry shortly"},
		{"a status made on purpose", status.Error(codes.Unauthenticated, "send a key"), codes.Unauthenticated, "send a key"},
		{"a bug", errors.New("nil map"), codes.Internal, "internal error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := status.Convert(s.toStatus(context.Background(), tc.err))
			if st.Code() != tc.code || tc.msg != "" && st.Message() != tc.msg {
				t.Fatalf("%v %q, want %v %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
			if strings.Contains(st.Message(), "10.0.0.7") {
				t.Fatalf("the outage's cause reached the caller: %q", st.Message())
			}
		})
	}
}

// failingStore is a run store that does not answer.
type failingStore struct {
	store.Store
	err error
}

func (f failingStore) Get(context.Context, string) (*agentv1.Run, error) { return nil, f.err }
func (f failingStore) List(context.Context, string, string, int, string) ([]*agentv1.Run, string, error) {
	return nil, "", f.err
}

// A run store that cannot be reached is an outage the caller may retry
// (Unavailable), not an internal error; the caller's own deadline is its
// own. (A store the service itself broke stays Internal and masked:
// TestStoreFailureReachesClientMasked.)
func TestRunStoreOutageIsUnavailable(t *testing.T) {
	// A real refused connection: an address nothing listens on any more.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	_, refused := net.Dial("tcp", addr)
	if refused == nil {
		t.Skip("the closed port answered")
	}
	down := failingStore{Store: store.NewMemory(), err: fmt.Errorf("read run: %w", refused)}
	h := newHarness(t, DefaultConfig(), fixed(&scripted{}), func(d *Deps) { d.Store = down })
	ctx := context.Background()
	if _, err := h.client.GetRun(ctx, &agentv1.GetRunRequest{RunId: "run-1"}); status.Code(err) != codes.Unavailable || strings.Contains(err.Error(), addr) {
		t.Fatalf("GetRun with the store down: %v, want Unavailable without the cause", err)
	}
	if _, err := h.client.ListRuns(ctx, &agentv1.ListRunsRequest{SessionId: "s-1"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("ListRuns with the store down: %v, want Unavailable", err)
	}
	late := failingStore{Store: store.NewMemory(), err: fmt.Errorf("query: %w", context.DeadlineExceeded)}
	h = newHarness(t, DefaultConfig(), fixed(&scripted{}), func(d *Deps) { d.Store = late })
	if _, err := h.client.GetRun(ctx, &agentv1.GetRunRequest{RunId: "run-1"}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("GetRun past its deadline: %v, want DeadlineExceeded", err)
	}
}
