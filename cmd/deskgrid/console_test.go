package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestEndToEndConsole drives the web console in headless Chromium
// (playwright-core) against a real `deskgrid up` on the default desktop
// image: create a session (with a text editor started), see its live
// thumbnail in the list, see its desktop, take over and hand back input,
// record the screen, upload a file into a new folder and download it, start
// a run against a fake Anthropic API speaking the real streaming wire
// format, approve its action, read the transcript and the history with its
// filters, replay the recording seeking by its events, and inspect the
// accessibility tree by pointing at the live view.
//
// DESKGRID_CONSOLE_SHOTS=dir keeps pictures of every page and tab there.
func TestEndToEndConsole(t *testing.T) {
	// The fake provider listens on a loopback port the script picks.
	p := startUpOnDesktop(t, t.TempDir(), t.TempDir(), "-provider-base-urls", "http://127.0.0.1:*")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	script, err := filepath.Abs("../../gateway/e2e/console.spec.mjs")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "node", script,
		"--base-url", p.httpURL, "--provider-url", "builtin",
		"--api-key", p.key,
		"--expect-tool", "computer", "--expect-screenshot", "--approve",
		"--features", "--autostart", "mousepad",
		"--artifacts", t.TempDir())
	if dir := os.Getenv("DESKGRID_CONSOLE_SHOTS"); dir != "" {
		cmd.Args = append(cmd.Args, "--shots", dir)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("console script: %v\n%s\n--- deskgrid logs ---\n%s", err, out, p.logs)
	}
	t.Logf("%s", out)
}
