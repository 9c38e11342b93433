package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
)

// TestEndToEndSessionsLiveWhileUsed: with a short idle timeout, a session
// hit with screenshots and execs more often than its timeout keeps
// running, and so does one a VNC viewer watches; one left alone stops as
// idle, and a run asked for on it is refused. Once nobody uses the others,
// they stop too.
func TestEndToEndSessionsLiveWhileUsed(t *testing.T) {
	const idle = 6 * time.Second
	p := startUp(t, t.TempDir(), t.TempDir(), "-default-idle-timeout", idle.String(), "-activity-interval", "500ms", "-reap-interval", "500ms")
	defer p.stop()
	conn, err := dial(p.grpc, grpc.WithPerRPCCredentials(auth.KeyCredentials(p.key)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	displays, sandboxes := displayv1.NewDisplayServiceClient(conn), sandboxv1.NewSandboxServiceClient(conn)
	ctx := context.Background()

	// Each put to use as soon as it runs (creating the next may take a
	// while on a loaded machine).
	used := p.createSession(640, 480)
	if _, err := displays.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: used.ID}); err != nil {
		t.Fatal(err)
	}
	viewed := p.createSession(640, 480)
	vctx, leave := context.WithCancel(ctx)
	defer leave()
	viewer, err := displays.ConnectVNC(vctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := viewer.Send(&displayv1.ConnectVNCRequest{SessionId: viewed.ID, ViewOnly: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := viewer.Recv(); err != nil { // the RFB greeting: the viewer is connected
		t.Fatalf("VNC: %v", err)
	}
	alone := p.createSession(640, 480)

	state := func(id string) sessionJSON {
		code, body, _ := p.do("GET", "/v1/sessions/"+id, "")
		if code != http.StatusOK {
			t.Fatalf("get %s: %d %s", id, code, body)
		}
		var s sessionJSON
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Two idle timeouts of use, a call every second.
	for i := 0; time.Duration(i)*time.Second < 2*idle+2*time.Second; i++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if i%2 == 0 {
			_, err = displays.Screenshot(cctx, &displayv1.ScreenshotRequest{SessionId: used.ID})
		} else {
			var st sandboxv1.SandboxService_ExecClient
			if st, err = sandboxes.Exec(cctx, &sandboxv1.ExecRequest{SessionId: used.ID, Argv: []string{"true"}}); err == nil {
				for err == nil {
					_, err = st.Recv()
				}
				if err.Error() == "EOF" {
					err = nil
				}
			}
		}
		cancel()
		if err != nil {
			t.Fatalf("use %d: %v", i, err)
		}
		for _, s := range []sessionJSON{used, viewed} {
			if got := state(s.ID); got.State != "SESSION_STATE_RUNNING" {
				t.Fatalf("session in use %s after %ds: %s (%s)\n%s", s.ID, i, got.State, got.StateReason, p.logs)
			}
		}
		time.Sleep(time.Second)
	}
	if got := state(alone.ID); got.State != "SESSION_STATE_STOPPED" || got.StateReason != "idle timeout" {
		t.Fatalf("session left alone: %s (%s)", got.State, got.StateReason)
	}
	// A run on the stopped session is refused, saying why.
	code, body, _ := p.do("POST", "/v1/sessions/"+alone.ID+"/runs", `{"prompt":"work"}`)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "STOPPED") {
		t.Fatalf("run on a stopped session: %d %s", code, body)
	}

	leave()
	deadline := time.Now().Add(60 * time.Second)
	for _, s := range []sessionJSON{used, viewed} {
		for {
			got := state(s.ID)
			if got.State == "SESSION_STATE_STOPPED" {
				if got.StateReason != "idle timeout" {
					t.Fatalf("%s stopped for %q", s.ID, got.StateReason)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session no longer used %s still %s", s.ID, got.State)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// TestEndToEndRunKeepsItsSessionAndFailsWithIt: an agent run in progress
// (its model slow to answer) keeps its session from stopping as idle;
// deleting the session fails the run with the reason.
func TestEndToEndRunKeepsItsSessionAndFailsWithIt(t *testing.T) {
	const idle = 6 * time.Second
	// A model that never answers: the run stays in progress.
	asked := make(chan struct{}, 16)
	quit := make(chan struct{})
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	defer model.Close()
	defer close(quit)
	p := startUp(t, t.TempDir(), t.TempDir(), "-default-idle-timeout", idle.String(), "-activity-interval", "500ms", "-reap-interval", "500ms",
		"-anthropic-api-key", "sk-test", "-anthropic-base-url", model.URL)
	defer p.stop()
	s := p.createSession(640, 480)
	code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+"/runs", `{"prompt":"work","options":{"skipInputLease":true}}`)
	if code != http.StatusOK {
		t.Fatalf("create run: %d %s", code, body)
	}
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &created); err != nil || created.ID == "" {
		t.Fatalf("run %s: %v", body, err)
	}
	select {
	case <-asked:
	case <-time.After(60 * time.Second):
		t.Fatal("the model was never asked")
	}
	type stateJSON struct {
		State       string `json:"state"`
		StateReason string `json:"stateReason"`
	}
	get := func(path string) stateJSON {
		code, body, _ := p.do("GET", path, "")
		if code != http.StatusOK {
			t.Fatalf("get %s: %d %s", path, code, body)
		}
		var st stateJSON
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// Two idle timeouts and more with nothing but the run in progress.
	for start := time.Now(); time.Since(start) < 2*idle+2*time.Second; time.Sleep(time.Second) {
		if st := get("/v1/sessions/" + s.ID); st.State != "SESSION_STATE_RUNNING" {
			t.Fatalf("session with a run in progress: %s (%s)\n%s", st.State, st.StateReason, p.logs)
		}
		if st := get("/v1/runs/" + created.ID); st.State != "RUN_STATE_RUNNING" {
			t.Fatalf("run: %s (%s)", st.State, st.StateReason)
		}
	}
	if code, body, _ := p.do("DELETE", "/v1/sessions/"+s.ID, ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := get("/v1/runs/" + created.ID)
		if st.State != "RUN_STATE_RUNNING" && st.State != "RUN_STATE_QUEUED" {
			want := "session " + s.ID + " stopped: deleted"
			if st.State != "RUN_STATE_FAILED" || st.StateReason != want {
				t.Fatalf("run after its session was deleted: %s %q, want FAILED %q", st.State, st.StateReason, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run still %s after its session was deleted", st.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
