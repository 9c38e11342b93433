package session

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
)

// With auth on, a call that reaches the service with no principal (past
// the interceptors, as an in-process caller could) is anonymous, not the
// system: it finds no session, not even one made for no tenant, may act on
// none, lists none and may create none.
func TestTenancyAnonymousIsNotTheSystem(t *testing.T) {
	h := newHarness(t, withTenancy(auth.CallerOf))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	system := auth.AsSystem(ctx)
	created, err := h.svc.CreateSession(system, &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	if got := created.GetSession().GetTenant(); got != "" {
		t.Fatalf("the system's session belongs to %q, want no tenant", got)
	}

	anon := ctx // the harness's server has no interceptors: no principal
	for name, call := range map[string]func() error{
		"GetSession": func() error {
			_, err := h.client.GetSession(anon, &sessionv1.GetSessionRequest{SessionId: id})
			return err
		},
		"KeepaliveSession": func() error {
			_, err := h.client.KeepaliveSession(anon, &sessionv1.KeepaliveSessionRequest{SessionId: id})
			return err
		},
		"SuspendSession": func() error {
			_, err := h.client.SuspendSession(anon, &sessionv1.SuspendSessionRequest{SessionId: id})
			return err
		},
		"DeleteSession": func() error {
			_, err := h.client.DeleteSession(anon, &sessionv1.DeleteSessionRequest{SessionId: id})
			return err
		},
		"WatchSession": func() error {
			st, err := h.client.WatchSession(anon, &sessionv1.WatchSessionRequest{SessionId: id})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.NotFound {
			t.Errorf("anonymous %s of the system's session: %v, want NotFound", name, err)
		}
	}
	if l, err := h.client.ListSessions(anon, &sessionv1.ListSessionsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("anonymous ListSessions: %v, %v; want Unauthenticated", l.GetSessions(), err)
	}
	if _, err := h.client.CreateSession(anon, &sessionv1.CreateSessionRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("anonymous CreateSession: %v, want Unauthenticated", err)
	}

	// The system still has its session, and lists every tenant's.
	acme := auth.WithPrincipal(ctx, auth.Principal{Tenant: "acme", KeyID: "k1"})
	if _, err := h.svc.CreateSession(acme, &sessionv1.CreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	got, err := h.svc.GetSession(system, &sessionv1.GetSessionRequest{SessionId: id})
	if err != nil || got.GetSession().GetState() != sessionv1.SessionState_SESSION_STATE_RUNNING {
		t.Fatalf("the system lost its own session: %v, %v", got, err)
	}
	if l, err := h.svc.ListSessions(system, &sessionv1.ListSessionsRequest{}); err != nil || len(l.GetSessions()) != 2 {
		t.Fatalf("the system's ListSessions: %v, %v; want both sessions", l.GetSessions(), err)
	}
	if l, err := h.svc.ListSessions(acme, &sessionv1.ListSessionsRequest{}); err != nil || len(l.GetSessions()) != 1 || l.GetSessions()[0].GetTenant() != "acme" {
		t.Fatalf("acme's ListSessions: %v, %v; want its own session", l.GetSessions(), err)
	}
}
