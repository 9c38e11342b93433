package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/agent/lease"
)

type leaseClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *leaseClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *leaseClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// GetInputLease tells the session's owner who holds its input lease, the
// token and expiry and how many wait, never the lease_id; a released or
// expired lease is none; another tenant learns nothing.
func TestGetInputLeaseTellsTheHolderNeverTheLeaseID(t *testing.T) {
	clk := &leaseClock{t: time.Now()}
	sessions := startSessions(t, &fakeSessions{owner: map[string]string{"s-1": "acme", "s-2": "globex"}})
	h := newHarness(t, DefaultConfig(), fixed(&scripted{turns: []func(provider.Request) (*provider.Response, error){}}), func(d *Deps) {
		d.Sessions = sessionv1.NewSessionServiceClient(sessions)
		d.Leases = lease.NewMemory(clk.now)
	})
	owner := asTenant("acme")
	get := func(ctx context.Context, session string) (*agentv1.GetInputLeaseResponse, error) {
		return h.client.GetInputLease(ctx, &agentv1.GetInputLeaseRequest{SessionId: session})
	}

	free, err := get(owner, "s-1")
	if err != nil || free.GetLease() != nil || free.GetWaiting() != 0 {
		t.Fatalf("never held: %v, %v", free, err)
	}
	held, err := h.client.AcquireInputLease(owner, &agentv1.AcquireInputLeaseRequest{SessionId: "s-1", Holder: "run-abc", Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, stop := context.WithCancel(owner)
	defer stop()
	waited := make(chan error, 1)
	go func() {
		_, err := h.client.AcquireInputLease(waitCtx, &agentv1.AcquireInputLeaseRequest{SessionId: "s-1", Holder: "person"})
		waited <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	var got *agentv1.GetInputLeaseResponse
	for {
		got, err = get(owner, "s-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.GetWaiting() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter never shows: %v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	l := got.GetLease()
	if l.GetHolder() != "run-abc" || l.GetToken() != held.GetLease().GetToken() || l.GetSessionId() != "s-1" ||
		!l.GetExpireTime().AsTime().Equal(held.GetLease().GetExpireTime().AsTime()) {
		t.Fatalf("lease %v, acquired %v", l, held.GetLease())
	}
	if l.GetLeaseId() != "" || held.GetLease().GetLeaseId() == "" {
		t.Fatalf("GetInputLease told the lease id %q", l.GetLeaseId())
	}

	// Another tenant: the NotFound of a session that does not exist, for a
	// held lease of someone else's session as for its own missing one.
	attacker := asTenant("globex")
	_, errOther := get(attacker, "s-1")
	_, errMissing := get(attacker, "s-missing")
	if status.Code(errOther) != codes.NotFound || status.Code(errMissing) != codes.NotFound {
		t.Fatalf("another tenant's session: %v; a missing one: %v", errOther, errMissing)
	}
	if _, err := get(attacker, "s-2"); err != nil {
		t.Fatalf("the attacker's own session: %v", err)
	}
	if _, err := get(owner, ""); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no session id: %v", err)
	}

	// The waiter gives up; the lease expires: nobody holds it.
	stop()
	if err := <-waited; status.Code(err) != codes.Canceled {
		t.Fatalf("the waiter: %v", err)
	}
	clk.add(time.Minute)
	for {
		got, err = get(owner, "s-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.GetWaiting() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter that gave up still counts: %v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got.GetLease() != nil {
		t.Fatalf("an expired lease is still told: %v", got.GetLease())
	}
}
