package activity_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/activity"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

const interval = 50 * time.Millisecond

func start(t *testing.T) (*activity.Tracker, *activity.Monitor) {
	_, nc, _ := natstest.Start(t)
	m, err := activity.NewMonitor(activity.MonitorConfig{Interval: interval}, activity.MonitorDeps{NATS: nc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	tr, err := activity.NewTracker(activity.TrackerConfig{Reporter: "test", Interval: interval}, activity.TrackerDeps{NATS: nc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr, m
}

func TestTouchHoldAndRelease(t *testing.T) {
	tr, m := start(t)
	if st := m.Session("s-a"); !st.LastActive.IsZero() || st.Busy {
		t.Fatalf("unused session: %+v", st)
	}
	before := time.Now()
	tr.Touch("s-a")
	testkit.Eventually(t, 10*time.Second, func() bool { return !m.Session("s-a").LastActive.IsZero() }, "the touch reported")
	st := m.Session("s-a")
	if st.Busy || st.LastActive.Before(before.Add(-interval)) {
		t.Fatalf("touched session: %+v", st)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return m.Session("s-a").Warm }, "the monitor warm")

	release := tr.Hold("s-b")
	testkit.Eventually(t, 10*time.Second, func() bool { return m.Session("s-b").Busy }, "the hold reported")
	// Held across many reports: busy all along, its last use moving.
	first := m.Session("s-b").LastActive
	testkit.Eventually(t, 10*time.Second, func() bool { return m.Session("s-b").LastActive.After(first.Add(2 * interval)) }, "the held session's last use moving")
	if !m.Session("s-b").Busy {
		t.Fatal("held session no longer busy")
	}
	release()
	release() // twice is once
	testkit.Eventually(t, 10*time.Second, func() bool { return !m.Session("s-b").Busy }, "the released session no longer busy")
	m.Forget("s-b")
	if st := m.Session("s-b"); !st.LastActive.IsZero() {
		t.Fatalf("forgotten session: %+v", st)
	}
}

// The interceptors note calls on a display or sandbox, hold streams busy,
// and leave refused calls and lifecycle calls out.
func TestInterceptors(t *testing.T) {
	tr, m := start(t)
	unary := func(method, id string, err error) {
		t.Helper()
		_, gotErr := activity.UnaryForTest(tr)(context.Background(), &displayv1.ScreenshotRequest{SessionId: id},
			&grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, err })
		if gotErr != err {
			t.Fatalf("error %v, want %v", gotErr, err)
		}
	}
	unary(displayv1.DisplayService_Screenshot_FullMethodName, "s-used", nil)
	unary(displayv1.DisplayService_Screenshot_FullMethodName, "s-refused", status.Error(codes.NotFound, "no such session"))
	unary(displayv1.DisplayService_Screenshot_FullMethodName, "s-failed", status.Error(codes.Internal, "x"))
	unary(displayv1.DisplayService_DeleteDisplay_FullMethodName, "s-lifecycle", nil)
	unary(sessionv1.SessionService_GetSession_FullMethodName, "s-other-service", nil)
	testkit.Eventually(t, 10*time.Second, func() bool { return !m.Session("s-used").LastActive.IsZero() }, "the call reported")
	testkit.Eventually(t, 10*time.Second, func() bool { return !m.Session("s-failed").LastActive.IsZero() }, "the failed call reported")
	tr.Flush()
	time.Sleep(3 * interval)
	for _, id := range []string{"s-refused", "s-lifecycle", "s-other-service"} {
		if st := m.Session(id); !st.LastActive.IsZero() || st.Busy {
			t.Errorf("%s: %+v, want no use", id, st)
		}
	}

	// A stream holds its session from its first message to its end.
	stream := activity.StreamForTest(tr)
	end := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- stream(nil, &fakeStream{msg: &displayv1.ConnectVNCRequest{SessionId: "s-viewer"}},
			&grpc.StreamServerInfo{FullMethod: displayv1.DisplayService_ConnectVNC_FullMethodName},
			func(_ any, ss grpc.ServerStream) error {
				var req displayv1.ConnectVNCRequest
				if err := ss.RecvMsg(&req); err != nil {
					return err
				}
				<-end
				return nil
			})
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { return m.Session("s-viewer").Busy }, "the viewer's session busy")
	close(end)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return !m.Session("s-viewer").Busy }, "the viewer's session idle after it left")
}

type fakeStream struct {
	grpc.ServerStream
	msg *displayv1.ConnectVNCRequest
}

func (f *fakeStream) Context() context.Context { return context.Background() }

func (f *fakeStream) RecvMsg(m any) error {
	req := m.(*displayv1.ConnectVNCRequest)
	req.SessionId = f.msg.GetSessionId()
	return nil
}
