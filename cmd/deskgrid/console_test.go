package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestEndToEndConsole drives the web console in headless Chromium
// (playwright-core) against a real `deskgrid up`: create a session, see its
// desktop, take over and hand back input, start a run against a fake
// Anthropic API speaking the real streaming wire format, approve its action,
// and read the transcript and the history timeline.
func TestEndToEndConsole(t *testing.T) {
	// The fake provider listens on a loopback port the script picks.
	p := startUp(t, t.TempDir(), t.TempDir(), "-provider-base-urls", "http://127.0.0.1:*")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	script, err := filepath.Abs("../../gateway/e2e/console.spec.mjs")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "node", script,
		"--base-url", p.httpURL, "--provider-url", "builtin",
		"--api-key", p.key,
		"--expect-tool", "computer", "--expect-screenshot", "--approve",
		"--artifacts", t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("console script: %v\n%s\n--- deskgrid logs ---\n%s", err, out, p.logs)
	}
	t.Logf("%s", out)
}
