package session

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/activity"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
	"github.com/deskgrid/deskgrid/services/session/state"
)

// The reaper stops a session left alone past its idle timeout, and none
// that is used: one used more often than its timeout, one held busy (a
// viewer, a stream, a run in progress). When the use ends, it stops them.
func TestReaperSparesSessionsInUse(t *testing.T) {
	const every = 50 * time.Millisecond
	h := newHarness(t, withActivity(every), withConfig(func(c *Config) { c.ReapInterval = every }))
	tr, err := activity.NewTracker(activity.TrackerConfig{Reporter: "test-node", Interval: every}, activity.TrackerDeps{NATS: h.nc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	ctx := context.Background()
	idle := 600 * time.Millisecond
	create := func() string {
		r, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{IdleTimeout: durationpb.New(idle)})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetSession().GetId()
	}
	alone, used, held := create(), create(), create()
	release := tr.Hold(held)
	stopUse := make(chan struct{})
	useDone := make(chan struct{})
	go func() {
		defer close(useDone)
		tk := time.NewTicker(idle / 4)
		defer tk.Stop()
		for {
			select {
			case <-stopUse:
				return
			case <-tk.C:
				tr.Touch(used)
			}
		}
	}()
	get := func(id string) *sessionv1.Session {
		r, err := h.client.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetSession()
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return get(alone).GetState() == state.Stopped }, "the session left alone stopped")
	if r := get(alone).GetStateReason(); r != ReasonIdleTimeout {
		t.Fatalf("reason %q", r)
	}
	// Several idle timeouts later, the used and the held ones still run.
	start := time.Now()
	for time.Since(start) < 4*idle {
		for _, id := range []string{used, held} {
			if s := get(id); s.GetState() != state.Running {
				t.Fatalf("session in use %s is %s (%s)", id, state.Name(s.GetState()), s.GetStateReason())
			}
		}
		time.Sleep(every)
	}
	// What a reader sees of its last use is recent.
	if last := get(used).GetLastActiveTime().AsTime(); time.Since(last) > idle {
		t.Errorf("used session's last_active_time %s ago", time.Since(last))
	}
	close(stopUse)
	<-useDone
	release()
	for _, id := range []string{used, held} {
		testkit.Eventually(t, 10*time.Second, func() bool { return get(id).GetState() == state.Stopped }, "a session no longer used stopped")
		if r := get(id).GetStateReason(); r != ReasonIdleTimeout {
			t.Fatalf("reason %q", r)
		}
	}
}
