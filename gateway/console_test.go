package gateway

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// runConsoleSpec runs the console's browser test (e2e/console.spec.mjs,
// playwright-core in headless Chromium) against a gateway.
func runConsoleSpec(t *testing.T, baseURL string, args ...string) {
	t.Helper()
	if _, err := os.Stat("e2e/node_modules/playwright-core/package.json"); err != nil {
		t.Fatal("playwright-core missing: run scripts/setup --dev (npm ci in gateway/e2e)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node missing: run scripts/setup --dev (Debian packages nodejs and npm)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	base := []string{"e2e/console.spec.mjs", "--base-url", baseURL, "--artifacts", filepath.Join(t.TempDir(), "artifacts"), "--timeout", "20000"}
	// Pictures of the pages, for a person to look at.
	if dir := os.Getenv("DESKGRID_CONSOLE_SHOTS"); dir != "" {
		base = append(base, "--shots", dir)
	}
	cmd := exec.CommandContext(ctx, "node", append(base, args...)...)
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		t.Log(line)
	}
	if err != nil {
		t.Fatalf("console.spec.mjs: %v", err)
	}
}

// The console end to end: create a session with options, see its desktop,
// take over and hand back, start a run against the (fake) provider, see the
// transcript with its screenshot, see the history, see the files,
// recordings and inspector tabs give the status and message of calls these
// fakes do not serve, delete the session.
func TestConsoleEndToEnd(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	consoleEndToEnd(t, h)
}

// The same with authentication: the console signs in (a wrong key refused
// first), sends the key on every call and stream, opens the live view with
// a view token and takes over with a control token, comes back to the
// sign-in form on a 401, and signs out. The backends check the forwarded
// key as deskgrid's services do.
func TestConsoleEndToEndWithAuth(t *testing.T) {
	a := newAuthed(t, DefaultConfig(), Deps{})
	consoleEndToEnd(t, a.harness, "--api-key", a.writeKey)
	// Every live view was opened by the gateway for the key's tenant.
	a.display.mu.Lock()
	defer a.display.mu.Unlock()
	for i, c := range a.display.callers {
		if !c.System || c.Tenant != "default" {
			t.Errorf("ConnectVNC %d came from %+v, want the gateway acting for tenant default", i, c)
		}
	}
	if len(a.display.callers) < 3 {
		t.Errorf("%d live views opened, want at least 3", len(a.display.callers))
	}
}

// The session list's live pictures: one fetch at a time, each session's at
// most every 10 s, paused while nobody touches the page (a picture counts as
// use of the session), resumed by a touch. Run under a fake clock.
func TestConsoleThumbnails(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	runConsoleSpec(t, h.srv.URL, "--scenario", "thumbnails")
}

func consoleEndToEnd(t *testing.T, h *harness, args ...string) {
	requireNoVNC(t, h)
	const providerURL = "http://127.0.0.1:9/fake-provider"
	runConsoleSpec(t, h.srv.URL, append([]string{"--provider-url", providerURL, "--provider-key", "sk-test",
		"--expect", scriptedLastText, "--expect-tool", "computer", "--expect-screenshot", "--expect-nodes", "--approve",
		"--expect-color", "18,160,99", "--expect-size", "64x48", "--width", "640", "--height", "400", "--expect-errors"}, args...)...)

	// What the browser asked for reached the services.
	cr := h.sessions.lastCreated()
	if cr == nil || cr.GetDisplay().GetWidth() != 640 || cr.GetDisplay().GetHeight() != 400 ||
		cr.GetTtl().AsDuration() != 30*time.Minute || cr.GetIdleTimeout().AsDuration() != 10*time.Minute || cr.GetLabels()["e2e"] != "console" {
		t.Errorf("create request %v", cr)
	}
	run := h.agent.lastCreated()
	if run == nil || run.GetBaseUrl() != providerURL || run.GetApiKey() != "sk-test" || run.GetProvider() != "anthropic" || run.GetModel() == "" || len(run.GetOptions().GetApprovalTools()) == 0 {
		t.Fatalf("run request %v", run)
	}
	sid := run.GetSessionId()
	// The live view connected view-only, in control once taken over, and
	// view-only again after handing back.
	var modes []bool
	h.display.mu.Lock()
	for _, f := range h.display.firsts {
		if f.GetSessionId() == sid {
			modes = append(modes, proto.Clone(f).(*displayv1.ConnectVNCRequest).GetViewOnly())
		}
	}
	h.display.mu.Unlock()
	if len(modes) < 3 || !modes[0] || modes[1] || !modes[len(modes)-1] {
		t.Errorf("viewer connections (view-only each): %v", modes)
	}
	if h.agent.holder() != "" {
		t.Errorf("the lease is still held by %q", h.agent.holder())
	}
	if h.sessions.has(sid) || h.sessions.has("s-2") {
		t.Error("the session was not deleted")
	}
}
