package deskgrid_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
)

// rest calls the REST gateway as curl would.
func rest(t *testing.T, srv *deskgridtest.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.HTTPURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+srv.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, v
}

// The clipboard and windows of a real session, with openbox in its
// sandbox, through the SDK and the REST gateway.
func TestClipboardAndWindows(t *testing.T) {
	srv, ctx, s := openboxSession(t)

	if err := s.SetClipboard(ctx, "héllo 世界"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetClipboard(ctx, "mouse", deskgrid.PrimarySelection()); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Clipboard(ctx); err != nil || got != "héllo 世界" {
		t.Fatalf("clipboard %q, %v", got, err)
	}
	if got, err := s.Clipboard(ctx, deskgrid.PrimarySelection()); err != nil || got != "mouse" {
		t.Fatalf("primary %q, %v", got, err)
	}
	if err := s.SetClipboard(ctx, strings.Repeat("x", 1<<20+1)); !errors.Is(err, deskgrid.ErrInvalidArgument) {
		t.Fatalf("over 1 MiB: %v", err)
	}
	if err := s.Paste(ctx, "вставка 粘贴"); err != nil {
		t.Fatal(err)
	}
	// A paste gives the clipboard back as it was before it.
	if got, err := s.Clipboard(ctx); err != nil || got != "héllo 世界" {
		t.Fatalf("clipboard after paste %q, %v; want what it held before", got, err)
	}
	code, v := rest(t, srv, "POST", "/v1/sessions/"+s.GetId()+"/clipboard", `{"text":"from REST ✓"}`)
	if code != 200 {
		t.Fatalf("POST clipboard: %d %v", code, v)
	}
	code, v = rest(t, srv, "GET", "/v1/sessions/"+s.GetId()+"/clipboard", "")
	if code != 200 || v["text"] != "from REST ✓" || v["owned"] != true {
		t.Fatalf("GET clipboard: %d %v", code, v)
	}
}

// A program started through the processes API in a session on the node's
// programs shows its window on the session's display, where openbox (started
// in the sandbox beside it) frames it and the windows API finds and moves it.
func TestStartedProgramWindow(t *testing.T) {
	srv, ctx, s := openboxSession(t)

	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sb := sandboxv1.NewSandboxServiceClient(conn)
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+srv.APIKey)
	p, err := sb.StartProcess(actx, &sandboxv1.StartProcessRequest{SessionId: s.GetId(), Argv: []string{"xmessage", "-name", "dgtest", "hello"}})
	if err != nil {
		t.Fatalf("start xmessage: %v", err)
	}
	var win *displayv1.Window
	for win == nil {
		ws, err := s.Windows(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			// openbox has framed it (the title bar moves it down).
			if w.GetInstance() == "dgtest" && w.GetGeometry().GetY() > 1 {
				win = w
			}
		}
		if win != nil {
			break
		}
		if l, err := sb.ListProcesses(actx, &sandboxv1.ListProcessesRequest{SessionId: s.GetId()}); err == nil {
			for _, got := range l.GetProcesses() {
				if got.GetProcessId() == p.GetProcess().GetProcessId() && got.GetState() == sandboxv1.ProcessState_PROCESS_STATE_EXITED {
					t.Fatalf("xmessage exited (%v) without showing a window", got.GetExit())
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("xmessage's window never appeared: %v", ws)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if w, err := s.ActivateWindow(ctx, win.GetId()); err != nil || !w.GetFocused() {
		t.Fatalf("activate: %v %v", w, err)
	}
	if w, err := s.MoveWindow(ctx, win.GetId(), 30, 40, 300, 120); err != nil || w.GetGeometry().GetX() != 30 || w.GetGeometry().GetY() != 40 || w.GetGeometry().GetWidth() != 300 {
		t.Fatalf("move: %v %v", w, err)
	}
	if w, err := s.SetWindowState(ctx, win.GetId(), displayv1.WindowState_WINDOW_STATE_MINIMIZED); err != nil || !w.GetMinimized() {
		t.Fatalf("minimise: %v %v", w, err)
	}
	code, v := rest(t, srv, "GET", "/v1/sessions/"+s.GetId()+"/windows", "")
	if code != 200 || !strings.Contains(fmt.Sprint(v["windows"]), "dgtest") {
		t.Fatalf("GET windows: %d %v", code, v)
	}
	code, v = rest(t, srv, "POST", fmt.Sprintf("/v1/sessions/%s/windows/%d:activate", s.GetId(), win.GetId()), `{}`)
	if w, _ := v["window"].(map[string]any); code != 200 || w["focused"] != true || w["minimized"] == true {
		t.Fatalf("POST :activate: %d %v", code, v)
	}
	code, v = rest(t, srv, "POST", fmt.Sprintf("/v1/sessions/%s/windows/%d:setState", s.GetId(), win.GetId()), `{"state":"WINDOW_STATE_MAXIMIZED"}`)
	if w, _ := v["window"].(map[string]any); code != 200 || w["maximized"] != true {
		t.Fatalf("POST :setState: %d %v", code, v)
	}
	code, v = rest(t, srv, "POST", fmt.Sprintf("/v1/sessions/%s/windows/%d:move", s.GetId(), 12345), `{"geometry":{"x":1,"y":1}}`)
	if code != 404 {
		t.Fatalf("unknown window: %d %v", code, v)
	}
	if closed, err := s.CloseWindow(ctx, win.GetId()); err != nil || !closed {
		t.Fatalf("close: %v %v", closed, err)
	}
	for {
		ws, err := s.Windows(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after close: %v", ws)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// openboxSession starts deskgrid with openbox as the window manager and
// creates an 800x600 session; ctx bounds the test's calls.
func openboxSession(t *testing.T) (*deskgridtest.Server, context.Context, *deskgrid.Session) {
	t.Helper()
	srv := deskgridtest.Start(t, "-window-manager", "openbox")
	c, err := deskgrid.New(srv.GRPCAddr, deskgrid.WithAPIKey(srv.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{Width: 800, Height: 600})
	if err != nil {
		t.Fatal(err)
	}
	return srv, ctx, s
}
