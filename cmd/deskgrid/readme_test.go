package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fakeAnthropic answers every Messages call with a short final text,
// streamed in the Messages API's server-sent events.
func fakeAnthropic(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		ev := func(name string, data any) {
			b, _ := json.Marshal(data)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		}
		ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": []any{}, "usage": map[string]any{"input_tokens": 10, "output_tokens": 1}}})
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "Done."}})
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]any{"output_tokens": 2}})
		ev("message_stop", map[string]any{"type": "message_stop"})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// readmeCommands returns the README's `bin/deskgrid ...` command lines
// (from its sh blocks), one command each, without comments.
func readmeCommands(t *testing.T) []string {
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			in = !in && strings.TrimPrefix(line, "```") == "sh"
			continue
		}
		if !in {
			continue
		}
		for _, part := range strings.Split(line, "; ") {
			part = strings.TrimSpace(part)
			if i := strings.Index(part, "  #"); i >= 0 {
				part = strings.TrimSpace(part[:i])
			}
			if strings.HasPrefix(part, "bin/deskgrid ") {
				out = append(out, part)
			}
		}
	}
	return out
}

// TestREADMECommands runs every `bin/deskgrid` command the README shows,
// as written, against a real deskgrid, with its placeholders filled in.
func TestREADMECommands(t *testing.T) {
	model := fakeAnthropic(t)
	p := startUp(t, t.TempDir(), t.TempDir(), "-anthropic-api-key", "sk-test", "-anthropic-base-url", model.URL)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(deskgridBinary(t), filepath.Join(dir, "bin", "deskgrid")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.pdf"), []byte("%PDF-1.4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := p.createSession(640, 480)
	vars := map[string]string{"<session>": s.ID, "<id>": s.ID}
	keyID := regexp.MustCompile(`dg_([A-Za-z0-9]+)_`)
	runID := regexp.MustCompile(`(?m)^(run-[0-9a-f]+)\s`)
	cmds := readmeCommands(t)
	if len(cmds) < 10 {
		t.Fatalf("found only %d commands in the README: %q", len(cmds), cmds)
	}
	for _, line := range cmds {
		if strings.HasPrefix(line, "bin/deskgrid up") {
			continue // the deskgrid under test
		}
		// The session the examples delete is the last thing they use.
		cmdline := line
		for k, v := range vars {
			cmdline = strings.ReplaceAll(cmdline, k, v)
		}
		if strings.Contains(cmdline, "<") && !strings.Contains(cmdline, "<(") {
			t.Fatalf("README command %q has a placeholder the test does not know", line)
		}
		cmd := exec.Command("sh", "-c", cmdline)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "DESKGRID_ADDR="+p.grpc, "DESKGRID_DATA_DIR="+p.dataDir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README command %q: %v\n%s", line, err, out)
		}
		if m := keyID.FindSubmatch(out); m != nil && strings.Contains(line, "keys create") {
			vars["<key-id>"] = string(m[1])
		}
		if m := runID.FindSubmatch(out); m != nil && strings.Contains(line, "runs create") {
			vars["<run>"] = string(m[1])
		}
	}
}
