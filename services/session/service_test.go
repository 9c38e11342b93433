package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/deskgrid/deskgrid/services/platform/auth/quota"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
	"github.com/deskgrid/deskgrid/services/session/state"
	"github.com/deskgrid/deskgrid/services/session/store"
)

func codeOf(err error) codes.Code { return status.Code(err) }

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := codeOf(err); got != want {
		t.Fatalf("got %v (%v), want %v", got, err, want)
	}
}

func states(ss ...sessionv1.SessionState) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = state.Name(s)
	}
	return strings.Join(names, ",")
}

func TestCreateSessionRunsAndPublishesEveryStep(t *testing.T) {
	h := newHarness(t)
	rec := h.record(t)
	ctx := context.Background()
	resp, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{
		Labels:    map[string]string{"team": "qa"},
		Autostart: []string{"xterm"},
		Ttl:       durationpb.New(2 * time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := resp.GetSession()
	if !validID(s.GetId()) {
		t.Errorf("id %q has the wrong shape", s.GetId())
	}
	if s.GetState() != state.Running || s.GetNodeId() != "node-1" || s.GetXDisplay() != ":101" || s.GetGeneration() != 3 {
		t.Errorf("session = %v", s)
	}
	if s.GetTenant() != DefaultTenant {
		t.Errorf("tenant %q", s.GetTenant())
	}
	d := s.GetDisplay()
	if d.GetWidth() != 1280 || d.GetHeight() != 800 || d.GetDepth() != 24 {
		t.Errorf("display defaults not applied: %v", d)
	}
	if s.GetIdleTimeout().AsDuration() != 15*time.Minute || s.GetTtl().AsDuration() != 2*time.Hour {
		t.Errorf("ttl %v idle %v", s.GetTtl().AsDuration(), s.GetIdleTimeout().AsDuration())
	}
	if got := s.GetExpireTime().AsTime().Sub(s.GetCreateTime().AsTime()); got != 2*time.Hour {
		t.Errorf("expire_time is create_time + %s", got)
	}
	want := []string{"sandbox.create " + s.GetId(), "display.create " + s.GetId(), "display.screenshot " + s.GetId()}
	for _, prog := range s.GetAutostart() {
		want = append(want, "sandbox.start sh -c "+prog+" "+s.GetId())
	}
	if got := h.node.Calls(); !slices.Equal(got, want) {
		t.Errorf("node calls %v, want %v", got, want)
	}
	// Every transition is published, in order, carrying the session after it.
	testkit.Eventually(t, 10*time.Second, func() bool { return len(rec.of(s.GetId())) == 3 }, "three events")
	evs := rec.of(s.GetId())
	wantFromTo := [][2]sessionv1.SessionState{
		{sessionv1.SessionState_SESSION_STATE_UNSPECIFIED, state.Pending},
		{state.Pending, state.Starting},
		{state.Starting, state.Running},
	}
	for i, e := range evs {
		if e.GetFrom() != wantFromTo[i][0] || e.GetTo() != wantFromTo[i][1] || e.GetSession().GetState() != e.GetTo() ||
			e.GetSession().GetGeneration() != int64(i+1) {
			t.Errorf("event %d: %s -> %s (session %s gen %d)", i, state.Name(e.GetFrom()), state.Name(e.GetTo()),
				state.Name(e.GetSession().GetState()), e.GetSession().GetGeneration())
		}
	}
	if evs[1].GetSession().GetNodeId() != "node-1" {
		t.Errorf("STARTING event lacks the node")
	}
	got, err := h.client.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: s.GetId()})
	if err != nil || got.GetSession().GetGeneration() != 3 {
		t.Fatalf("GetSession = %v, %v", got, err)
	}
	if h.placer.Used() != 1 {
		t.Errorf("placer holds %d", h.placer.Used())
	}
}

func TestCreateFailureUndoesAndFails(t *testing.T) {
	tests := []struct {
		name     string
		failOp   string
		err      error
		code     codes.Code
		undone   []string // node calls made to undo
		noUndo   bool
		selector map[string]string
		capacity int
	}{
		{name: "display create", failOp: "display.create", err: status.Error(codes.Internal, "Xvfb died"), code: codes.Unavailable},
		{name: "display refuses", failOp: "display.create", err: status.Error(codes.ResourceExhausted, "no display numbers"), code: codes.ResourceExhausted},
		{name: "sandbox create", failOp: "sandbox.create", err: status.Error(codes.Unavailable, "connection refused"), code: codes.Unavailable},
		{name: "screenshot", failOp: "display.screenshot", err: errors.New("broken pipe"), code: codes.Unavailable},
		{name: "no matching node", selector: map[string]string{"zone": "b"}, code: codes.FailedPrecondition, noUndo: true},
		{name: "node full", capacity: -1, code: codes.ResourceExhausted, noUndo: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []option
			if tt.capacity < 0 {
				opts = append(opts, withCapacity(1))
			}
			h := newHarness(t, opts...)
			ctx := context.Background()
			if tt.capacity < 0 {
				if _, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{}); err != nil {
					t.Fatal(err)
				}
			}
			rec := h.record(t)
			if tt.failOp != "" {
				h.node.failOn(tt.failOp, tt.err)
			}
			before := len(h.node.Calls())
			_, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{NodeSelector: tt.selector})
			wantCode(t, err, tt.code)

			failed, _, lerr := h.store.List(ctx, store.Filter{States: []sessionv1.SessionState{state.Failed}})
			if lerr != nil || len(failed) != 1 {
				t.Fatalf("want one FAILED session, got %d (%v)", len(failed), lerr)
			}
			f := failed[0]
			if f.GetStateReason() == "" || !strings.Contains(err.Error(), f.GetId()) {
				t.Errorf("reason %q; error %q should name the session", f.GetStateReason(), err)
			}
			calls := h.node.Calls()[before:]
			undid := slices.Contains(calls, "display.delete "+f.GetId()) && slices.Contains(calls, "sandbox.delete "+f.GetId())
			if undid == tt.noUndo {
				t.Errorf("node calls %v; undo expected: %v", calls, !tt.noUndo)
			}
			wantUsed := 0
			if tt.capacity < 0 {
				wantUsed = 1
			}
			if h.placer.Used() != wantUsed {
				t.Errorf("placer holds %d, want %d", h.placer.Used(), wantUsed)
			}
			if d, sb := h.node.Live(); d != wantUsed || sb != wantUsed {
				t.Errorf("node left %d displays and %d sandboxes", d, sb)
			}
			testkit.Eventually(t, 10*time.Second, func() bool {
				evs := rec.of(f.GetId())
				return len(evs) > 0 && evs[len(evs)-1].GetTo() == state.Failed
			}, "FAILED event")
			// A FAILED session can be deleted, which stops it for good.
			del, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: f.GetId()})
			if err != nil || del.GetSession().GetState() != state.Stopped {
				t.Fatalf("delete failed session: %v, %v", del, err)
			}
		})
	}
}

func TestCreateTimeout(t *testing.T) {
	h := newHarness(t, withConfig(func(c *Config) { c.CreateTimeout = 300 * time.Millisecond }))
	_, release := h.node.hold("display.create")
	defer release()
	_, err := h.client.CreateSession(context.Background(), &sessionv1.CreateSessionRequest{})
	wantCode(t, err, codes.DeadlineExceeded)
	failed, _, _ := h.store.List(context.Background(), store.Filter{States: []sessionv1.SessionState{state.Failed}})
	if len(failed) != 1 {
		t.Fatalf("%d FAILED sessions", len(failed))
	}
	if d, sb := h.node.Live(); d != 0 || sb != 0 {
		t.Errorf("node left %d displays and %d sandboxes", d, sb)
	}
}

func TestCreateValidation(t *testing.T) {
	long := strings.Repeat("a", 64)
	tooMany := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprint("k", i)] = "v"
		}
		return m
	}
	tests := []struct {
		name  string
		req   *sessionv1.CreateSessionRequest
		field string
	}{
		{"width zero", &sessionv1.CreateSessionRequest{Display: &sessionv1.DisplaySpec{Width: proto.Int32(0)}}, "display.width"},
		{"width small", &sessionv1.CreateSessionRequest{Display: &sessionv1.DisplaySpec{Width: proto.Int32(63)}}, "display.width"},
		{"width large", &sessionv1.CreateSessionRequest{Display: &sessionv1.DisplaySpec{Width: proto.Int32(7681)}}, "display.width"},
		{"width negative", &sessionv1.CreateSessionRequest{Display: &sessionv1.DisplaySpec{Width: proto.Int32(-1)}}, "display.width"},
		{"height small", &sessionv1.CreateSessionRequest{Display: &sessionv1.DisplaySpec{Height: proto.Int32(10)}}, "display.height"},
		{"height large", &sessionv1.CreateSessionRequest{Display: &sessionv1.DisplaySpec{Height: proto.Int32(4321)}}, "display.height"},
		{"depth", &sessionv1.CreateSessionRequest{Display: &sessionv1.DisplaySpec{Depth: proto.Int32(32)}}, "display.depth"},
		{"dpi negative", &sessionv1.CreateSessionRequest{Display: &sessionv1.DisplaySpec{Dpi: -1}}, "display.dpi"},
		{"dpi large", &sessionv1.CreateSessionRequest{Display: &sessionv1.DisplaySpec{Dpi: 1001}}, "display.dpi"},
		{"memory negative", &sessionv1.CreateSessionRequest{Limits: &sessionv1.ResourceLimits{MemoryBytes: -1}}, "limits.memory_bytes"},
		{"ttl negative", &sessionv1.CreateSessionRequest{Ttl: durationpb.New(-time.Second)}, "ttl"},
		{"ttl too long", &sessionv1.CreateSessionRequest{Ttl: durationpb.New(25 * time.Hour)}, "ttl"},
		{"ttl malformed", &sessionv1.CreateSessionRequest{Ttl: &durationpb.Duration{Seconds: 1, Nanos: -1}}, "ttl"},
		{"idle negative", &sessionv1.CreateSessionRequest{IdleTimeout: durationpb.New(-time.Minute)}, "idle_timeout"},
		{"label key upper", &sessionv1.CreateSessionRequest{Labels: map[string]string{"Team": "x"}}, "labels"},
		{"label key long", &sessionv1.CreateSessionRequest{Labels: map[string]string{long: "x"}}, "labels"},
		{"label key empty", &sessionv1.CreateSessionRequest{Labels: map[string]string{"": "x"}}, "labels"},
		{"label key space", &sessionv1.CreateSessionRequest{Labels: map[string]string{"a b": "x"}}, "labels"},
		{"label value control", &sessionv1.CreateSessionRequest{Labels: map[string]string{"a": "x\n"}}, "labels"},
		{"too many labels", &sessionv1.CreateSessionRequest{Labels: tooMany(65)}, "labels"},
		{"selector key", &sessionv1.CreateSessionRequest{NodeSelector: map[string]string{"Zone": "a"}}, "node_selector"},
		{"too many autostart", &sessionv1.CreateSessionRequest{Autostart: slices.Repeat([]string{"xterm"}, 17)}, "autostart"},
		{"empty autostart", &sessionv1.CreateSessionRequest{Autostart: []string{"xterm", " "}}, "autostart[1]"},
		{"request id long", &sessionv1.CreateSessionRequest{RequestId: strings.Repeat("r", 129)}, "request_id"},
		{"workspace control", &sessionv1.CreateSessionRequest{Workspace: "/w\x00"}, "workspace"},
		// Stored with the failed session and echoed twice in its reason.
		{"image long", &sessionv1.CreateSessionRequest{Image: strings.Repeat("a", 1000000) + ":v1"}, "image"},
		{"image control", &sessionv1.CreateSessionRequest{Image: "team/app:v1\n"}, "image"},
	}
	h := newHarness(t)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.client.CreateSession(ctx, tt.req)
			wantCode(t, err, codes.InvalidArgument)
			st := status.Convert(err)
			if !strings.HasPrefix(st.Message(), tt.field) {
				t.Errorf("message %q does not start with the field %q", st.Message(), tt.field)
			}
			var field string
			for _, d := range st.Details() {
				if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) == 1 {
					field = br.GetFieldViolations()[0].GetField()
				}
			}
			if !strings.HasPrefix(field, tt.field) {
				t.Errorf("BadRequest field %q, want %q", field, tt.field)
			}
		})
	}
	// Limits that are allowed at the edges.
	for _, req := range []*sessionv1.CreateSessionRequest{
		{Display: &sessionv1.DisplaySpec{Width: proto.Int32(64), Height: proto.Int32(64), Depth: proto.Int32(16), Dpi: 1000}},
		{Ttl: durationpb.New(24 * time.Hour), Labels: tooMany(64), Autostart: slices.Repeat([]string{"x"}, 16)},
		{Labels: map[string]string{strings.Repeat("a", 63): "", "a.b/c-d_e": "v"}, RequestId: strings.Repeat("r", 128)},
	} {
		if _, err := h.sp(req); err != nil {
			t.Errorf("valid request %v refused: %v", req, err)
		}
	}
	all, _, err := h.store.List(ctx, store.Filter{})
	if err != nil || len(all) != 0 {
		t.Fatalf("invalid creates wrote %d sessions (%v)", len(all), err)
	}
	if calls := h.node.Calls(); len(calls) != 0 {
		t.Fatalf("invalid creates reached the node: %v", calls)
	}
}

// sp validates a request without creating anything.
func (h *harness) sp(req *sessionv1.CreateSessionRequest) (spec, error) {
	return h.svc.validateCreate(req)
}

// A retry of a create whose session failed starts a new session; it never
// answers 200 with the dead one.
func TestCreateRetryAfterFailure(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	req := &sessionv1.CreateSessionRequest{RequestId: "after-503"}
	h.node.failOn("sandbox.create", status.Error(codes.Unavailable, "connection refused"))
	if _, err := h.client.CreateSession(ctx, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("create on an unreachable node: %v, want Unavailable", err)
	}
	failed, err := h.store.FindByRequestID(ctx, DefaultTenant, "after-503")
	if err != nil || failed.GetState() != state.Failed {
		t.Fatalf("first try: %v, %v", failed, err)
	}
	h.node.failOn("sandbox.create", nil)
	again, err := h.client.CreateSession(ctx, req)
	if err != nil || again.GetSession().GetState() != state.Running || again.GetSession().GetId() == failed.GetId() {
		t.Fatalf("retry after the failure: %v, %v", again.GetSession(), err)
	}
	// From now on the retries name the running session.
	third, err := h.client.CreateSession(ctx, req)
	if err != nil || third.GetSession().GetId() != again.GetSession().GetId() {
		t.Fatalf("third try: %v, %v", third.GetSession(), err)
	}
}

func TestCreateIdempotentByRequestID(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	req := &sessionv1.CreateSessionRequest{RequestId: "retry-me"}
	first, err := h.client.CreateSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.client.CreateSession(ctx, req)
	if err != nil || again.GetSession().GetId() != first.GetSession().GetId() {
		t.Fatalf("retry made %v (%v), want %s", again.GetSession().GetId(), err, first.GetSession().GetId())
	}
	// Many retries at once still make one session.
	req = &sessionv1.CreateSessionRequest{RequestId: "burst"}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got = map[string]int{}
	)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := h.client.CreateSession(ctx, req)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got[r.GetSession().GetId()]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(got) != 1 {
		t.Fatalf("concurrent retries made sessions %v", got)
	}
	// Another tenant's request id is its own.
	other, err := h.client.CreateSession(asTenant(ctx, "globex"), &sessionv1.CreateSessionRequest{RequestId: "retry-me"})
	if err != nil || other.GetSession().GetId() == first.GetSession().GetId() {
		t.Fatalf("other tenant got %v, %v", other.GetSession().GetId(), err)
	}
	all, _, _ := h.store.List(ctx, store.Filter{})
	if len(all) != 3 {
		t.Fatalf("%d sessions, want 3", len(all))
	}
	creates := 0
	for _, c := range h.node.Calls() {
		if strings.HasPrefix(c, "sandbox.create") {
			creates++
		}
	}
	if creates != 3 {
		t.Fatalf("%d sandboxes created, want 3", creates)
	}
}

func TestGetSession(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	created, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	tests := []struct {
		name string
		ctx  context.Context
		id   string
		code codes.Code
	}{
		{"own", ctx, id, codes.OK},
		{"unknown", ctx, "s-aaaaaaaaaaaaaaaaaaaa", codes.NotFound},
		{"other tenant", asTenant(ctx, "globex"), id, codes.NotFound},
		{"empty", ctx, "", codes.InvalidArgument},
		{"garbage", ctx, "../etc/passwd", codes.InvalidArgument},
		{"upper case", ctx, strings.ToUpper(id), codes.InvalidArgument},
		{"short", ctx, "s-abc", codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.client.GetSession(tt.ctx, &sessionv1.GetSessionRequest{SessionId: tt.id})
			wantCode(t, err, tt.code)
		})
	}
	for _, call := range []func() error{
		func() error {
			_, err := h.client.DeleteSession(asTenant(ctx, "globex"), &sessionv1.DeleteSessionRequest{SessionId: id})
			return err
		},
		func() error {
			_, err := h.client.KeepaliveSession(asTenant(ctx, "globex"), &sessionv1.KeepaliveSessionRequest{SessionId: id})
			return err
		},
	} {
		wantCode(t, call(), codes.NotFound)
	}
}

func TestDeleteSession(t *testing.T) {
	h := newHarness(t)
	rec := h.record(t)
	ctx := context.Background()
	created, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	del, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	s := del.GetSession()
	if s.GetState() != state.Stopped || s.GetStateReason() != ReasonDeleted || s.GetGeneration() != 5 {
		t.Fatalf("deleted session %v", s)
	}
	if d, sb := h.node.Live(); d != 0 || sb != 0 || h.placer.Used() != 0 {
		t.Fatalf("left %d displays, %d sandboxes, %d placements", d, sb, h.placer.Used())
	}
	// Deleting again returns it unchanged.
	again, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id})
	if err != nil || again.GetSession().GetGeneration() != 5 {
		t.Fatalf("second delete: %v, %v", again, err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(rec.of(id)) == 5 }, "stop events")
	var got []sessionv1.SessionState
	for _, e := range rec.of(id) {
		got = append(got, e.GetTo())
	}
	if want := states(state.Pending, state.Starting, state.Running, state.Stopping, state.Stopped); states(got...) != want {
		t.Fatalf("events %s, want %s", states(got...), want)
	}
	_, err = h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: "s-bbbbbbbbbbbbbbbbbbbb"})
	wantCode(t, err, codes.NotFound)
}

func TestConcurrentDeletes(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	created, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	var wg sync.WaitGroup
	results := make([]*sessionv1.Session, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id})
			if err != nil {
				t.Errorf("delete %d: %v", i, err)
				return
			}
			results[i] = r.GetSession()
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.GetState() != state.Stopped || r.GetGeneration() != 5 {
			t.Errorf("delete %d returned %s generation %d", i, state.Name(r.GetState()), r.GetGeneration())
		}
	}
	if d, sb := h.node.Live(); d != 0 || sb != 0 || h.placer.Used() != 0 {
		t.Fatalf("left %d displays, %d sandboxes, %d placements", d, sb, h.placer.Used())
	}
}

// A caller that gives up on a delete half-way (its connection closed, a
// gateway restarted under it) does not leave the session half torn down:
// the service finishes taking it off its node and the session is STOPPED,
// not FAILED with its sandbox still running on the node.
func TestDeleteFinishesWhenTheCallerGivesUp(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	created, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	entered, release := h.node.hold("sandbox.delete")
	// Called as the gRPC server would, with the call's context, which
	// ends when the caller goes away.
	dctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := h.svc.DeleteSession(dctx, &sessionv1.DeleteSessionRequest{SessionId: id})
		errc <- err
	}()
	<-entered
	cancel()
	// The delete carries on past its caller: it ends once the node
	// answers, not when the caller left.
	select {
	case err := <-errc:
		t.Fatalf("delete ended with its caller: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if err := <-errc; err != nil {
		t.Fatalf("delete: %v", err)
	}
	s, err := h.store.Get(ctx, id)
	if err != nil || s.GetState() != state.Stopped || s.GetStateReason() != ReasonDeleted {
		t.Fatalf("deleted session %v, %v", s, err)
	}
	if d, sb := h.node.Live(); d != 0 || sb != 0 || h.placer.Used() != 0 {
		t.Fatalf("left %d displays, %d sandboxes, %d placements", d, sb, h.placer.Used())
	}
}

func TestDeleteWhileStarting(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	entered, release := h.node.hold("display.create")
	errc := make(chan error, 1)
	go func() {
		_, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
		errc <- err
	}()
	<-entered
	all, _, err := h.store.List(ctx, store.Filter{})
	if err != nil || len(all) != 1 || all[0].GetState() != state.Starting {
		t.Fatalf("sessions %v, %v", all, err)
	}
	del, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: all[0].GetId()})
	if err != nil || del.GetSession().GetState() != state.Stopped {
		t.Fatalf("delete while starting: %v, %v", del, err)
	}
	release()
	wantCode(t, <-errc, codes.Aborted)
	if d, sb := h.node.Live(); d != 0 || sb != 0 || h.placer.Used() != 0 {
		t.Fatalf("left %d displays, %d sandboxes, %d placements", d, sb, h.placer.Used())
	}
	got, _ := h.store.Get(ctx, all[0].GetId())
	if got.GetState() != state.Stopped {
		t.Fatalf("session ended %s", state.Name(got.GetState()))
	}
}

func TestDeleteNodeFailureLeavesFailed(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	created, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	h.node.failOn("sandbox.delete", status.Error(codes.Unavailable, "node down"))
	_, err = h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id})
	wantCode(t, err, codes.Unavailable)
	got, _ := h.store.Get(ctx, id)
	if got.GetState() != state.Failed || !strings.Contains(got.GetStateReason(), "sandbox") {
		t.Fatalf("after failed delete: %s %q", state.Name(got.GetState()), got.GetStateReason())
	}
	// Once the node answers again, a retry finishes the job.
	h.node.failOn("sandbox.delete", nil)
	del, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id})
	if err != nil || del.GetSession().GetState() != state.Stopped {
		t.Fatalf("retry: %v, %v", del, err)
	}
	if d, sb := h.node.Live(); d != 0 || sb != 0 {
		t.Fatalf("left %d displays, %d sandboxes", d, sb)
	}
}

func TestWatchSession(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	entered, release := h.node.hold("display.create")
	errc := make(chan error, 1)
	go func() {
		_, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
		errc <- err
	}()
	<-entered
	all, _, _ := h.store.List(ctx, store.Filter{})
	id := all[0].GetId()
	stream, err := h.client.WatchSession(ctx, &sessionv1.WatchSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	seen := []*sessionv1.Session{first.GetSession()}
	release()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, r.GetSession())
	}
	var got []sessionv1.SessionState
	for i, s := range seen {
		got = append(got, s.GetState())
		if i > 0 && s.GetGeneration() <= seen[i-1].GetGeneration() {
			t.Errorf("generation went from %d to %d", seen[i-1].GetGeneration(), s.GetGeneration())
		}
	}
	if want := states(state.Starting, state.Running, state.Stopping, state.Stopped); states(got...) != want {
		t.Fatalf("watch saw %s, want %s", states(got...), want)
	}
	// Watching an ended session returns it and ends.
	stream, err = h.client.WatchSession(ctx, &sessionv1.WatchSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetSession().GetState() != state.Stopped {
		t.Fatalf("watch stopped session: %v, %v", r, err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("watch of a stopped session did not end: %v", err)
	}
	for _, bad := range []string{"nope", "s-cccccccccccccccccccc"} {
		stream, err := h.client.WatchSession(ctx, &sessionv1.WatchSessionRequest{SessionId: bad})
		if err == nil {
			_, err = stream.Recv()
		}
		if c := codeOf(err); c != codes.InvalidArgument && c != codes.NotFound {
			t.Errorf("watch %q: %v", bad, err)
		}
	}
}

func TestWatchCatchesUpWithoutEvents(t *testing.T) {
	// Events can be lost (NATS down, slow consumer); the periodic re-read
	// still brings the watcher to the end.
	h := newHarness(t, withConfig(func(c *Config) { c.WatchResync = 20 * time.Millisecond }))
	h.svc.events = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	stream, err := h.client.WatchSession(ctx, &sessionv1.WatchSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetSession().GetState() != state.Running {
		t.Fatalf("first: %v, %v", r, err)
	}
	if _, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	var last *sessionv1.Session
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = r.GetSession()
	}
	if last.GetState() != state.Stopped {
		t.Fatalf("watch ended at %v", last)
	}
}

func TestListSessions(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		r, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{
			Labels: map[string]string{"n": fmt.Sprint(i), "parity": []string{"even", "odd"}[i%2]},
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetSession().GetId())
	}
	if _, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: ids[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.CreateSession(asTenant(ctx, "globex"), &sessionv1.CreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	list := func(req *sessionv1.ListSessionsRequest) []string {
		t.Helper()
		var out []string
		for {
			r, err := h.client.ListSessions(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if req.GetPageSize() > 0 && len(r.GetSessions()) > int(req.GetPageSize()) {
				t.Fatalf("page of %d, asked %d", len(r.GetSessions()), req.GetPageSize())
			}
			for _, s := range r.GetSessions() {
				out = append(out, s.GetId())
			}
			if r.GetNextPageToken() == "" {
				return out
			}
			req.PageToken = r.GetNextPageToken()
		}
	}
	newestFirst := slices.Clone(ids)
	slices.Reverse(newestFirst)
	if got := list(&sessionv1.ListSessionsRequest{PageSize: 2}); !slices.Equal(got, newestFirst) {
		t.Errorf("paged list %v, want %v", got, newestFirst)
	}
	if got := list(&sessionv1.ListSessionsRequest{}); !slices.Equal(got, newestFirst) {
		t.Errorf("default list %v, want %v", got, newestFirst)
	}
	if got := list(&sessionv1.ListSessionsRequest{PageSize: 1, Labels: map[string]string{"parity": "even"}}); !slices.Equal(got, []string{ids[4], ids[2], ids[0]}) {
		t.Errorf("even %v", got)
	}
	if got := list(&sessionv1.ListSessionsRequest{States: []sessionv1.SessionState{state.Running}, Labels: map[string]string{"parity": "even"}}); !slices.Equal(got, []string{ids[4], ids[2]}) {
		t.Errorf("running even %v", got)
	}
	if got := list(&sessionv1.ListSessionsRequest{States: []sessionv1.SessionState{state.Stopped}}); !slices.Equal(got, []string{ids[0]}) {
		t.Errorf("stopped %v", got)
	}
	bad := []*sessionv1.ListSessionsRequest{
		{PageSize: 1001},
		{PageSize: -1},
		{PageToken: "not-a-token"},
		{States: []sessionv1.SessionState{sessionv1.SessionState_SESSION_STATE_UNSPECIFIED}},
		{States: []sessionv1.SessionState{99}},
		{Labels: map[string]string{"BAD KEY": "x"}},
	}
	for _, req := range bad {
		_, err := h.client.ListSessions(ctx, req)
		wantCode(t, err, codes.InvalidArgument)
	}
	// A token only continues the list it came from.
	r, err := h.client.ListSessions(ctx, &sessionv1.ListSessionsRequest{PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.client.ListSessions(ctx, &sessionv1.ListSessionsRequest{PageSize: 1, PageToken: r.GetNextPageToken(), Labels: map[string]string{"parity": "odd"}})
	wantCode(t, err, codes.InvalidArgument)
	if _, err := h.client.ListSessions(ctx, &sessionv1.ListSessionsRequest{PageSize: 1000}); err != nil {
		t.Fatal(err)
	}
}

func TestKeepaliveSuspendResume(t *testing.T) {
	h := newHarness(t)
	clock := &manualClock{now: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}
	h.svc.now = clock.Now
	ctx := context.Background()
	created, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	counted := suspendCounts(t)
	clock.Advance(time.Minute)
	ka, err := h.client.KeepaliveSession(ctx, &sessionv1.KeepaliveSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if !ka.GetSession().GetLastActiveTime().AsTime().Equal(clock.Now()) || ka.GetSession().GetGeneration() != 4 {
		t.Fatalf("keepalive: %v", ka.GetSession())
	}
	_, err = h.client.SuspendSession(ctx, &sessionv1.SuspendSessionRequest{SessionId: id, Mode: 7})
	wantCode(t, err, codes.InvalidArgument)
	_, err = h.client.ResumeSession(ctx, &sessionv1.ResumeSessionRequest{SessionId: id})
	wantCode(t, err, codes.FailedPrecondition)

	// A freeze the node refuses leaves the session running.
	h.node.failOn("sandbox.freeze", status.Error(codes.Unavailable, "freezer gone"))
	_, err = h.client.SuspendSession(ctx, &sessionv1.SuspendSessionRequest{SessionId: id})
	wantCode(t, err, codes.Unavailable)
	if g, _ := h.client.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: id}); g.GetSession().GetState() != sessionv1.SessionState_SESSION_STATE_RUNNING {
		t.Fatalf("after a failed freeze: %v", g.GetSession().GetState())
	}
	h.node.failOn("sandbox.freeze", nil)

	// Freeze and thaw.
	sus, err := h.client.SuspendSession(ctx, &sessionv1.SuspendSessionRequest{SessionId: id})
	if err != nil || sus.GetSession().GetState() != sessionv1.SessionState_SESSION_STATE_SUSPENDED || sus.GetSession().GetSuspendMode() != sessionv1.SuspendMode_SUSPEND_MODE_FREEZE {
		t.Fatalf("freeze: %v %v", err, sus.GetSession())
	}
	res, err := h.client.ResumeSession(ctx, &sessionv1.ResumeSessionRequest{SessionId: id})
	if err != nil || res.GetSession().GetState() != sessionv1.SessionState_SESSION_STATE_RUNNING {
		t.Fatalf("thaw: %v %v", err, res.GetSession())
	}
	if calls := strings.Join(h.node.Calls(), ","); !strings.Contains(calls, "sandbox.freeze "+id+",sandbox.thaw "+id) {
		t.Fatalf("freeze and thaw calls: %s", calls)
	}

	// Hibernate: files to a snapshot, desktop stopped; resume brings both back.
	before := len(h.node.Calls())
	sus, err = h.client.SuspendSession(ctx, &sessionv1.SuspendSessionRequest{SessionId: id, Mode: sessionv1.SuspendMode_SUSPEND_MODE_HIBERNATE})
	if err != nil || sus.GetSession().GetState() != sessionv1.SessionState_SESSION_STATE_SUSPENDED || sus.GetSession().GetSnapshotId() == "" || sus.GetSession().GetXDisplay() != "" {
		t.Fatalf("hibernate: %v %v", err, sus.GetSession())
	}
	if d, b := h.node.Live(); d != 0 || b != 0 {
		t.Fatalf("hibernated session still holds %d displays and %d sandboxes", d, b)
	}
	res, err = h.client.ResumeSession(ctx, &sessionv1.ResumeSessionRequest{SessionId: id})
	if err != nil || res.GetSession().GetState() != sessionv1.SessionState_SESSION_STATE_RUNNING || res.GetSession().GetXDisplay() == "" || res.GetSession().GetSnapshotId() != "" {
		t.Fatalf("resume from hibernation: %v %v", err, res.GetSession())
	}
	got := strings.Join(h.node.Calls()[before:], ",")
	wantSeq := "sandbox.snapshot " + id + ",display.delete " + id + ",sandbox.delete " + id + ",sandbox.create " + id + ",display.create " + id + ",display.screenshot " + id + ",sandbox.snapshot.delete snap-" + id
	if got != wantSeq {
		t.Fatalf("hibernate and resume calls:\n got %s\nwant %s", got, wantSeq)
	}
	_, err = h.client.SuspendSession(ctx, &sessionv1.SuspendSessionRequest{SessionId: "x"})
	wantCode(t, err, codes.InvalidArgument)
	if _, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.KeepaliveSession(ctx, &sessionv1.KeepaliveSessionRequest{SessionId: id})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = h.client.SuspendSession(ctx, &sessionv1.SuspendSessionRequest{SessionId: id})
	wantCode(t, err, codes.FailedPrecondition)

	// Each call counted once, by mode and outcome.
	want := map[string]int64{
		"suspend unknown invalid_argument":   1, // mode 7
		"suspend freeze unavailable":         1,
		"suspend freeze ok":                  1,
		"suspend hibernate ok":               1,
		"suspend freeze invalid_argument":    1, // session "x"
		"suspend freeze failed_precondition": 1, // deleted
		"resume none failed_precondition":    1, // running
		"resume freeze ok":                   1,
		"resume hibernate ok":                1,
	}
	counts := map[string]int64{}
	for k, v := range suspendCounts(t) {
		if d := v - counted[k]; d != 0 {
			counts[k] = d
		}
	}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("suspends and resumes counted %v, want %v", counts, want)
	}
}

func TestReaperStopsExpiredSession(t *testing.T) {
	h := newHarness(t, withConfig(func(c *Config) { c.ReapInterval = 20 * time.Millisecond }))
	ctx := context.Background()
	short, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{Ttl: durationpb.New(200 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	long, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got *sessionv1.Session
	testkit.Eventually(t, 10*time.Second, func() bool {
		r, err := h.client.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: short.GetSession().GetId()})
		got = r.GetSession()
		return err == nil && got.GetState() == state.Stopped
	}, "short session reaped")
	if got.GetStateReason() != ReasonTTLExpired {
		t.Fatalf("reason %q", got.GetStateReason())
	}
	r, err := h.client.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: long.GetSession().GetId()})
	if err != nil || r.GetSession().GetState() != state.Running {
		t.Fatalf("the long session: %v, %v", r, err)
	}
	if d, sb := h.node.Live(); d != 1 || sb != 1 {
		t.Fatalf("node holds %d displays and %d sandboxes, want 1 each", d, sb)
	}
}

func TestReapIdleAndStale(t *testing.T) {
	h := newHarness(t, withConfig(func(c *Config) { c.StaleAfter = 10 * time.Minute }))
	clock := &manualClock{now: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}
	h.svc.now = clock.Now
	ctx := context.Background()
	idle, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{IdleTimeout: durationpb.New(10 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	busy, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{IdleTimeout: durationpb.New(10 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	// A session a dead process left STARTING.
	entered, release := h.node.hold("display.create")
	cctx, cancel := context.WithCancel(ctx)
	go func() { _, _ = h.client.CreateSession(cctx, &sessionv1.CreateSessionRequest{}) }()
	<-entered
	stuck, _, _ := h.store.List(ctx, store.Filter{States: []sessionv1.SessionState{state.Starting}})
	if len(stuck) != 1 {
		t.Fatalf("%d STARTING", len(stuck))
	}

	clock.Advance(8 * time.Minute)
	if _, err := h.client.KeepaliveSession(ctx, &sessionv1.KeepaliveSessionRequest{SessionId: busy.GetSession().GetId()}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	if n, err := h.svc.Reap(ctx); err != nil || n != 0 {
		t.Fatalf("early reap stopped %d (%v)", n, err)
	}
	clock.Advance(2 * time.Minute) // idle 11m, busy 3m, stuck for 11m
	n, err := h.svc.Reap(ctx)
	if err != nil || n != 2 {
		t.Fatalf("reap stopped %d (%v), want the idle and the stuck session", n, err)
	}
	for id, want := range map[string]string{
		idle.GetSession().GetId(): ReasonIdleTimeout,
		stuck[0].GetId():          ReasonCreateAbandoned,
	} {
		s, _ := h.store.Get(ctx, id)
		if s.GetState() != state.Stopped || s.GetStateReason() != want {
			t.Errorf("%s: %s %q, want STOPPED %q", id, state.Name(s.GetState()), s.GetStateReason(), want)
		}
	}
	s, _ := h.store.Get(ctx, busy.GetSession().GetId())
	if s.GetState() != state.Running {
		t.Errorf("busy session %s", state.Name(s.GetState()))
	}
	cancel()
	release()
}

func TestMarkNodeSessionsLost(t *testing.T) {
	h := newHarness(t)
	rec := h.record(t)
	ctx := context.Background()
	var ids []string
	for range 2 {
		r, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetSession().GetId())
	}
	if _, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: ids[1]}); err != nil {
		t.Fatal(err)
	}
	live, err := h.svc.LiveOnNode(ctx, "node-1")
	if err != nil || len(live) != 1 || !live[ids[0]] {
		t.Fatalf("live %v, %v", live, err)
	}
	n, err := h.svc.MarkNodeSessionsLost(ctx, "node-1", "node restarted")
	if err != nil || n != 1 {
		t.Fatalf("marked %d (%v)", n, err)
	}
	s, _ := h.store.Get(ctx, ids[0])
	if s.GetState() != state.Lost || s.GetStateReason() != "node restarted" {
		t.Fatalf("%s %q", state.Name(s.GetState()), s.GetStateReason())
	}
	if h.placer.Used() != 0 {
		t.Fatalf("placer holds %d", h.placer.Used())
	}
	if live, _ := h.svc.LiveOnNode(ctx, "node-1"); len(live) != 0 {
		t.Fatalf("live after lost: %v", live)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		evs := rec.of(ids[0])
		return len(evs) > 0 && evs[len(evs)-1].GetTo() == state.Lost
	}, "LOST event")
	// The node is gone: deleting a LOST session still ends it.
	delete(h.nodes, "node-1")
	del, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: ids[0]})
	if err != nil || del.GetSession().GetState() != state.Stopped {
		t.Fatalf("delete lost: %v, %v", del, err)
	}
}

func TestIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newID()
		if !validID(id) || len(id) != 22 || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "s-", "x-aaaaaaaaaaaaaaaaaaaa", "s-aaaaaaaaaaaaaaaaaaa1", "s-AAAAAAAAAAAAAAAAAAAA", "s-aaaaaaaaaaaaaaaaaaaaa"} {
		if validID(bad) {
			t.Errorf("validID(%q)", bad)
		}
	}
}

// TestServiceOnPostgres runs a session's whole life with the records in
// PostgreSQL, as in a cluster.
func TestServiceOnPostgres(t *testing.T) {
	h := newHarness(t, withStore(openPostgres))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{Labels: map[string]string{"db": "pg"}, RequestId: "pg-1"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	again, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{RequestId: "pg-1"})
	if err != nil || again.GetSession().GetId() != id {
		t.Fatalf("retry: %v, %v", again.GetSession().GetId(), err)
	}
	stream, err := h.client.WatchSession(ctx, &sessionv1.WatchSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	list, err := h.client.ListSessions(ctx, &sessionv1.ListSessionsRequest{Labels: map[string]string{"db": "pg"}, States: []sessionv1.SessionState{state.Running}})
	if err != nil || len(list.GetSessions()) != 1 {
		t.Fatalf("list: %v, %v", list, err)
	}
	if _, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	var last *sessionv1.Session
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = r.GetSession()
	}
	if last.GetState() != state.Stopped {
		t.Fatalf("watch ended at %v", last)
	}
}

// A watch from a client that sets no deadline (a browser through the
// gateway) works: the server must not need one.
func TestWatchWithoutDeadline(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	stream, err := h.client.WatchSession(wctx, &sessionv1.WatchSessionRequest{SessionId: resp.GetSession().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("watch without a deadline: %v", err)
	}
	if first.GetSession().GetState() != sessionv1.SessionState_SESSION_STATE_RUNNING {
		t.Fatalf("first watch message: %v", first.GetSession().GetState())
	}
}

func TestTenantQuota(t *testing.T) {
	h := newHarness(t, withConfig(func(c *Config) {
		c.TenantQuota = quota.Amount{Sessions: 2, CPUMillis: 1000}
		c.TenantQuotas = map[string]quota.Amount{"big": {Sessions: 3}}
	}))
	ctx := context.Background()
	as := func(tenant string) context.Context { return asTenant(ctx, tenant) }
	create := func(ctx context.Context, cpu int64) (*sessionv1.Session, error) {
		r, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{Limits: &sessionv1.ResourceLimits{CpuMillis: cpu}})
		return r.GetSession(), err
	}
	first, err := create(as("small"), 600)
	if err != nil {
		t.Fatal(err)
	}
	// CPU: 600 in use, 600 more would pass the 1000 limit.
	_, err = create(as("small"), 600)
	wantCode(t, err, codes.ResourceExhausted)
	if _, err := create(as("small"), 0); err != nil {
		t.Fatal(err)
	}
	// Sessions: two is the default limit.
	_, err = create(as("small"), 0)
	wantCode(t, err, codes.ResourceExhausted)
	// Another tenant has its own quota, and an override.
	for range 3 {
		if _, err := create(as("big"), 0); err != nil {
			t.Fatal(err)
		}
	}
	_, err = create(as("big"), 0)
	wantCode(t, err, codes.ResourceExhausted)
	// Ending a session frees its share; nothing was made for the refusals.
	if _, err := h.client.DeleteSession(as("small"), &sessionv1.DeleteSessionRequest{SessionId: first.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := create(as("small"), 0); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	if d, b := h.node.Live(); d != 5 || b != 5 {
		t.Fatalf("node holds %d displays and %d sandboxes, want 5 each", d, b)
	}
}

// With nothing configured, one tenant cannot take every node slot: the
// default cap refuses its next session, and another tenant still gets one.
func TestDefaultTenantSessionCap(t *testing.T) {
	h := newHarness(t)
	as := func(tenant string) context.Context { return asTenant(context.Background(), tenant) }
	for i := range DefaultTenantMaxSessions {
		if _, err := h.client.CreateSession(as("greedy"), &sessionv1.CreateSessionRequest{}); err != nil {
			t.Fatalf("session %d: %v", i+1, err)
		}
	}
	_, err := h.client.CreateSession(as("greedy"), &sessionv1.CreateSessionRequest{})
	wantCode(t, err, codes.ResourceExhausted)
	if _, err := h.client.CreateSession(as("other"), &sessionv1.CreateSessionRequest{}); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if d, _ := h.node.Live(); d != DefaultTenantMaxSessions+1 {
		t.Fatalf("node holds %d displays, want %d", d, DefaultTenantMaxSessions+1)
	}
}

// TestCommitSession commits a running session on its node and refuses what
// cannot be committed.
func TestCommitSession(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	created, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	got, err := h.client.CommitSession(ctx, &sessionv1.CommitSessionRequest{SessionId: id, Image: "my-team/qa-desktop:v3"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetImage() != "docker.io/my-team/qa-desktop:v3" || got.GetDigest() == "" {
		t.Fatalf("commit: %v", got)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		req  *sessionv1.CommitSessionRequest
		code codes.Code
	}{
		{"no image name", ctx, &sessionv1.CommitSessionRequest{SessionId: id}, codes.InvalidArgument},
		{"other tenant", asTenant(ctx, "globex"), &sessionv1.CommitSessionRequest{SessionId: id, Image: "x/y:z"}, codes.NotFound},
		{"unknown session", ctx, &sessionv1.CommitSessionRequest{SessionId: "s-aaaaaaaaaaaaaaaaaaaa", Image: "x/y:z"}, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.client.CommitSession(tc.ctx, tc.req)
			wantCode(t, err, tc.code)
		})
	}
	if _, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.CommitSession(ctx, &sessionv1.CommitSessionRequest{SessionId: id, Image: "x/y:z"})
	wantCode(t, err, codes.FailedPrecondition)
}

// The window manager is the session's own program: create asks the sandbox
// to start it (inside the session's namespaces, seccomp and cgroup, as the
// session's user) before the autostart programs, and asks the display for
// nothing but its X server. A window manager started by the display service
// ran on the host, where its menu's terminal was a root shell on the node.
func TestWindowManagerStartsInsideTheSandbox(t *testing.T) {
	h := newHarness(t, withConfig(func(c *Config) { c.Desktop = []string{"openbox", "--sm-disable"} }))
	resp, err := h.client.CreateSession(context.Background(), &sessionv1.CreateSessionRequest{Autostart: []string{"xterm"}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetId()
	want := []string{
		"sandbox.create " + id, "display.create " + id, "display.screenshot " + id,
		"sandbox.start openbox --sm-disable " + id,
		"sandbox.start sh -c xterm " + id,
	}
	if got := h.node.Calls(); !slices.Equal(got, want) {
		t.Fatalf("node calls %v, want %v", got, want)
	}
}
