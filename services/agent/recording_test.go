package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
)

// A run with options.record records its session from its start to its
// end, however it ends: the recording is stopped before the run is seen
// to end, and the run names it.
func TestRecordedRunRecordsUntilItEnds(t *testing.T) {
	anthropic := wireCases[0]
	for _, end := range []string{"succeeded", "failed", "cancelled"} {
		t.Run(end, func(t *testing.T) {
			ws := newWireServer(t, anthropic.authHeader, anthropic.turn)
			if end == "failed" {
				ws.failStatus, ws.failBody = 400, `{"type":"error","error":{"type":"invalid_request_error","message":"bad request"}}`
			}
			var prov func(context.Context, provider.Config) (provider.Provider, error)
			blocked := &scripted{block: make(chan struct{})}
			if end == "cancelled" {
				prov = fixed(blocked)
			}
			h := newHarness(t, allowing(DefaultConfig(), ws.srv.URL), prov)
			ctx := context.Background()
			created, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{
				SessionId: "s-1", Prompt: "write the file", Provider: anthropic.provider, Model: anthropic.model,
				ApiKey: "sk-test", BaseUrl: ws.srv.URL, Options: &agentv1.RunOptions{Record: true},
			})
			if err != nil {
				t.Fatal(err)
			}
			id := created.GetRun().GetId()
			want := agentv1.RunState_RUN_STATE_SUCCEEDED
			switch end {
			case "failed":
				want = agentv1.RunState_RUN_STATE_FAILED
			case "cancelled":
				want = agentv1.RunState_RUN_STATE_CANCELLED
				waitFor(t, "the model is asked", func() bool {
					blocked.mu.Lock()
					defer blocked.mu.Unlock()
					return len(blocked.reqs) > 0
				})
				// Running, it already names its recording.
				got, err := h.client.GetRun(ctx, &agentv1.GetRunRequest{RunId: id})
				if err != nil || got.GetRun().GetState() != agentv1.RunState_RUN_STATE_RUNNING || !strings.HasPrefix(got.GetRun().GetRecordingId(), "rec-") {
					t.Fatalf("running: %v %v", got.GetRun(), err)
				}
				if _, err := h.client.CancelRun(ctx, &agentv1.CancelRunRequest{RunId: id}); err != nil {
					t.Fatal(err)
				}
			}
			run := waitState(t, h.client, id, want)
			started, stopped := h.node.recordings()
			if run.GetRecordingId() == "" || len(started) != 1 || started[0] != "s-1/"+run.GetRecordingId() {
				t.Fatalf("run recording %q, recordings started %v", run.GetRecordingId(), started)
			}
			if len(stopped) != 1 || stopped[0] != started[0] {
				t.Fatalf("run %v, recordings stopped %v, want %v", run.GetState(), stopped, started)
			}
			if end == "succeeded" && run.GetSteps() != int32(len(script)) {
				t.Fatalf("run = %v", run)
			}
		})
	}
}

// A recording that cannot start fails the run before its first step,
// saying why; a run without options.record records nothing.
func TestRecordedRunFailsWhenRecordingCannot(t *testing.T) {
	p := &scripted{}
	h := newHarness(t, DefaultConfig(), fixed(p))
	h.node.rec.startErr = status.Error(codes.FailedPrecondition, "cannot record: the node has no ffmpeg (ffmpeg)")
	ctx := context.Background()
	created, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", Options: &agentv1.RunOptions{Record: true}})
	if err != nil {
		t.Fatal(err)
	}
	run := waitState(t, h.client, created.GetRun().GetId(), agentv1.RunState_RUN_STATE_FAILED)
	if !strings.Contains(run.GetStateReason(), "options.record") || !strings.Contains(run.GetStateReason(), "no ffmpeg") || run.GetRecordingId() != "" {
		t.Fatalf("run = %v", run)
	}
	p.mu.Lock()
	asked := len(p.reqs)
	p.mu.Unlock()
	if asked != 0 || run.GetSteps() != 0 {
		t.Fatalf("the model was asked %d times by a run that could not record", asked)
	}

	h.node.rec.mu.Lock()
	h.node.rec.startErr = nil
	h.node.rec.mu.Unlock()
	created, err = h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	run = waitState(t, h.client, created.GetRun().GetId(), agentv1.RunState_RUN_STATE_SUCCEEDED)
	if started, _ := h.node.recordings(); len(started) != 0 || run.GetRecordingId() != "" {
		t.Fatalf("a run without record: recordings %v, run %v", started, run)
	}
}

// waitFor polls cond until it holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
