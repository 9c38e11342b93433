package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
)

// holds counts the sessions held in use, as an activity tracker would.
type holds struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *holds) Hold(id string) func() {
	h.mu.Lock()
	h.n[id]++
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.n[id]--
			h.mu.Unlock()
		})
	}
}

func (h *holds) of(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[id]
}

// A run never outlives its session: when the session stops, fails, is lost
// or suspended, the run fails with the reason, in its record and in its
// events; a run asked for on a session that does not run is refused; and
// a run in progress holds its session in use.
func TestRunFailsWithItsSession(t *testing.T) {
	_, nc, js := natstest.Start(t)
	ctx := context.Background()
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig(1, time.Hour)); err != nil {
		t.Fatal(err)
	}
	pub := events.NewPublisher(js)
	sessions := &fakeSessions{}
	used := &holds{n: map[string]int{}}
	prov := &scripted{block: make(chan struct{})} // the model never answers
	h := newHarness(t, DefaultConfig(), fixed(prov), func(d *Deps) {
		d.Sessions = sessionv1.NewSessionServiceClient(startSessions(t, sessions))
		d.NATS = nc
		d.Activity = used
	})
	announce := func(id string, to sessionv1.SessionState, reason string) {
		t.Helper()
		sessions.set(id, to)
		if _, err := pub.Publish(ctx, events.Meta{Type: events.TypeSessionStateChanged, SessionID: id, Tenant: "default"},
			&eventsv1.SessionStateChanged{From: sessionv1.SessionState_SESSION_STATE_RUNNING, To: to, Reason: reason}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		session string
		to      sessionv1.SessionState
		reason  string
		want    string
	}{
		{"s-idle", sessionv1.SessionState_SESSION_STATE_STOPPING, "idle timeout", "session s-idle stopped: idle timeout"},
		{"s-deleted", sessionv1.SessionState_SESSION_STATE_STOPPING, "deleted", "session s-deleted stopped: deleted"},
		{"s-failed", sessionv1.SessionState_SESSION_STATE_FAILED, "stop: node gone", "session s-failed failed: stop: node gone"},
		{"s-lost", sessionv1.SessionState_SESSION_STATE_LOST, "node heartbeat expired", "session s-lost was lost: node heartbeat expired"},
		{"s-suspended", sessionv1.SessionState_SESSION_STATE_SUSPENDING, "", "session s-suspended was suspended"},
	} {
		t.Run(tc.session, func(t *testing.T) {
			resp, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: tc.session, Prompt: "work"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetId()
			waitState(t, h.client, id, agentv1.RunState_RUN_STATE_RUNNING)
			deadline := time.Now().Add(10 * time.Second)
			for used.of(tc.session) != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("run in progress holds its session %d times, want 1", used.of(tc.session))
				}
				time.Sleep(5 * time.Millisecond)
			}
			announce(tc.session, tc.to, tc.reason)
			run := waitState(t, h.client, id, agentv1.RunState_RUN_STATE_FAILED, agentv1.RunState_RUN_STATE_SUCCEEDED, agentv1.RunState_RUN_STATE_CANCELLED)
			if run.GetState() != agentv1.RunState_RUN_STATE_FAILED || run.GetStateReason() != tc.want {
				t.Fatalf("run %s %q, want FAILED %q", run.GetState(), run.GetStateReason(), tc.want)
			}
			// The run's events end with the same news.
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			st, err := h.client.StreamRunEvents(sctx, &agentv1.StreamRunEventsRequest{RunId: id})
			if err != nil {
				t.Fatal(err)
			}
			var last *agentv1.RunEvent
			for {
				ev, err := st.Recv()
				if err != nil {
					break
				}
				if ev.GetEvent().GetState() != agentv1.RunState_RUN_STATE_UNSPECIFIED {
					last = ev.GetEvent()
				}
			}
			if last.GetState() != agentv1.RunState_RUN_STATE_FAILED || last.GetReason() != tc.want {
				t.Fatalf("last state event %v %q, want FAILED %q", last.GetState(), last.GetReason(), tc.want)
			}
			deadline = time.Now().Add(10 * time.Second)
			for used.of(tc.session) != 0 {
				if time.Now().After(deadline) {
					t.Fatal("a finished run still holds its session")
				}
				time.Sleep(5 * time.Millisecond)
			}
			// The session no longer runs: a new run is refused, and so is
			// continuing the failed one.
			_, err = h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: tc.session, Prompt: "again"})
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("run on a %s session: %v, want FailedPrecondition", tc.to, err)
			}
			_, err = h.client.SendMessage(ctx, &agentv1.SendMessageRequest{RunId: id, Text: "go on"})
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("continuing a run on a %s session: %v, want FailedPrecondition", tc.to, err)
			}
		})
	}

	// A session whose end arrives after the run's check of it, but before
	// the run is admitted, refuses the run too: the service remembers ends.
	sessions.set("s-race", sessionv1.SessionState_SESSION_STATE_RUNNING)
	h.svc.sessionEnded(&sessionEndedError{session: "s-race", state: sessionv1.SessionState_SESSION_STATE_STOPPED, reason: "deleted"})
	_, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-race", Prompt: "work"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("run on a session that just ended: %v, want FailedPrecondition", err)
	}
	// A suspended session that resumes takes runs again.
	announce("s-suspended", sessionv1.SessionState_SESSION_STATE_RUNNING, "")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-suspended", Prompt: "work"})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run on a resumed session: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
