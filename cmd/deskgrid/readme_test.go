package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
)

// fakeAnthropic answers every Messages call with a short final text,
// streamed in the Messages API's server-sent events.
func fakeAnthropic(t *testing.T) *httptest.Server { return deskgridtest.DoneModel(t) }

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
	runDir := t.TempDir()
	p := startUp(t, t.TempDir(), runDir, "-anthropic-api-key", "sk-test", "-anthropic-base-url", model.URL)
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
	recID := regexp.MustCompile(`(?m)^(rec-[0-9a-z]+)\s`)
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
		if m := recID.FindSubmatch(out); m != nil && strings.Contains(line, "recordings start") {
			vars["<rec>"] = string(m[1])
		}
	}
}

// readmeShellLine is one command line of a README sh block: the command
// (continuation lines joined) and the comment after it, if any.
type readmeShellLine struct{ cmd, comment string }

// readmeShell returns the README's sh block lines, continuation lines
// joined, with the comment lines that follow a command (an expected
// answer such as `# 404 {"code":5,...}`) as its comment.
func readmeShell(t *testing.T) []readmeShellLine {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []readmeShellLine
	in, cont := false, ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in && strings.TrimPrefix(line, "```") == "sh"
			continue
		}
		if !in {
			continue
		}
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			if len(out) > 0 && out[len(out)-1].comment == "" {
				out[len(out)-1].comment = strings.TrimSpace(strings.TrimPrefix(line, "#"))
			}
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cont += strings.TrimSuffix(line, `\`)
			continue
		}
		line, cont = cont+line, ""
		for _, part := range splitCommands(line) {
			l := readmeShellLine{cmd: strings.TrimSpace(part)}
			if i := strings.Index(l.cmd, "  #"); i >= 0 {
				l.cmd, l.comment = strings.TrimSpace(l.cmd[:i]), strings.TrimSpace(l.cmd[i+3:])
			}
			if l.cmd != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// splitCommands splits a shell line at its "; " separators, those outside
// quotes.
func splitCommands(line string) []string {
	var out []string
	var quote rune
	start := 0
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == ';' && strings.HasPrefix(line[i:], "; "):
			out = append(out, line[start:i])
			start = i + 2
		}
	}
	return append(out, line[start:])
}

// jsonFieldsIn collects every "key":value of a JSON document, at any depth,
// with values as their JSON text (strings unquoted).
func jsonFieldsIn(v any, into map[string][]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch x := x.(type) {
			case string:
				into[k] = append(into[k], x)
			case float64:
				into[k] = append(into[k], fmt.Sprint(x))
			default:
				jsonFieldsIn(x, into)
			}
		}
	case []any:
		for _, x := range v {
			jsonFieldsIn(x, into)
		}
	}
}

// TestREADMEShellExamples runs the README's curl examples (the `dg` alias
// and plain curl, in every sh block) as written, through bash, against a
// real deskgrid on its own ports and data dir: the key is read from that
// data dir as the README says. Each answer must have the HTTP status and
// the fields the README's comment shows (a value ending in "..." is a
// prefix), or a 2xx status when it shows none.
func TestREADMEShellExamples(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	model := fakeAnthropic(t)
	runDir := t.TempDir()
	p := startUp(t, t.TempDir(), runDir, "-anthropic-api-key", "sk-test", "-anthropic-base-url", model.URL)
	host := strings.TrimPrefix(p.httpURL, "http://")
	dir := t.TempDir()
	subst := strings.NewReplacer("localhost:8080", host, "127.0.0.1:8080", host, "/var/lib/deskgrid", p.dataDir)
	field := regexp.MustCompile(`"(\w+)":("((?:[^"\\]|\\.)*)"|-?[0-9.]+)`)
	status := regexp.MustCompile(`^([1-5][0-9][0-9])( |$)`)
	// What the first start prints, as the README shows it ("..." elides).
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, banner, _ := strings.Cut(string(readme), "\n```\nThe first API key")
	banner, _, _ = strings.Cut("The first API key"+banner, "```")
	bannerSubst := strings.NewReplacer("127.0.0.1:8080", host, "127.0.0.1:9090", p.grpc, "/var/lib/deskgrid", p.dataDir)
	logs := strings.Join(strings.Fields(p.Logs()), " ")
	for _, line := range strings.Split(banner, "\n") {
		line, _, _ = strings.Cut(bannerSubst.Replace(line), "...")
		if strings.HasPrefix(strings.TrimSpace(line), "dg_") {
			line = "dg_" // an example key
		}
		if line = strings.Join(strings.Fields(line), " "); line != "" && !strings.Contains(logs, line) {
			t.Errorf("deskgrid up does not print the README's %q:\n%s", line, p.Logs())
		}
	}

	vars := map[string]string{}
	prelude := "shopt -s expand_aliases\n"
	ran := 0
	for _, l := range readmeShell(t) {
		switch {
		case strings.HasPrefix(l.cmd, "export "), strings.HasPrefix(l.cmd, "alias "):
			prelude += subst.Replace(l.cmd) + "\n"
			continue
		}
		word, rest, _ := strings.Cut(l.cmd, " ")
		if word != "dg" && word != "curl" {
			continue
		}
		if strings.Contains(rest, "<run>") && vars["<run>"] == "" {
			// A run to follow, on a session of its own.
			s := p.createSession(640, 480)
			cmd := exec.Command(deskgridBinary(t), "runs", "create", s.ID, "-prompt", "Say done", "-provider", "anthropic")
			cmd.Env = append(os.Environ(), "DESKGRID_ADDR="+p.grpc, "DESKGRID_DATA_DIR="+p.dataDir)
			out, err := cmd.CombinedOutput()
			m := regexp.MustCompile(`(?m)^(run-[0-9a-f]+)\s`).FindSubmatch(out)
			if err != nil || m == nil {
				t.Fatalf("runs create: %v\n%s", err, out)
			}
			vars["<run>"] = string(m[1])
		}
		cmdline := subst.Replace(rest)
		for k, v := range vars {
			cmdline = strings.ReplaceAll(cmdline, k, v)
		}
		if strings.ContainsAny(cmdline, "<") && !strings.Contains(cmdline, "< ") {
			t.Fatalf("README command %q has a placeholder the test does not know (%v)", l.cmd, vars)
		}
		// The HTTP status goes to stderr, the body where the README sends it.
		script := prelude + word + ` -w '%{stderr}%{http_code}' ` + cmdline
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir = dir
		var stdout, stderr syncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		stream := strings.Contains(" "+cmdline, " -N ")
		// An event stream is read until its first event, then hung up on:
		// bash and its curl are one process group, ended together.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		if stream {
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(stdout.String(), "\ndata: ") && time.Now().Before(deadline) {
				select {
				case err = <-done:
					deadline = time.Time{}
				case <-time.After(50 * time.Millisecond):
				}
			}
			cancel()
			if deadline.IsZero() && err != nil {
				t.Fatalf("README command %q: %v\n%s%s", l.cmd, err, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), "event: ") || !strings.Contains(stdout.String(), "\ndata: ") {
				t.Fatalf("README command %q: no server-sent events: status %s\n%s", l.cmd, stderr.String(), stdout.String())
			}
			ran++
			continue
		}
		err = <-done
		cancel()
		if err != nil {
			t.Fatalf("README command %q: %v\n%s%s", l.cmd, err, stdout.String(), stderr.String())
		}
		ran++
		got, body := strings.TrimSpace(stderr.String()), stdout.String()
		want := "2"
		if m := status.FindStringSubmatch(l.comment); m != nil {
			want = m[1]
		}
		if !strings.HasPrefix(got, want) {
			t.Fatalf("README command %q: status %s, want %s...\n%s", l.cmd, got, want, body)
		}
		if strings.HasPrefix(strings.TrimSpace(status.ReplaceAllString(l.comment, "")), "{") {
			var doc any
			if err := json.Unmarshal([]byte(body), &doc); err != nil {
				t.Fatalf("README command %q: answer is not JSON: %v\n%s", l.cmd, err, body)
			}
			fields := map[string][]string{}
			jsonFieldsIn(doc, fields)
			for _, m := range field.FindAllStringSubmatch(l.comment, -1) {
				key, wantv := m[1], m[2]
				if strings.HasPrefix(wantv, `"`) {
					wantv = strings.ReplaceAll(m[3], `\"`, `"`)
				}
				prefix := strings.HasSuffix(wantv, "...")
				wantv = strings.TrimSuffix(wantv, "...")
				ok := false
				for _, v := range fields[key] {
					ok = ok || v == wantv || (prefix && strings.HasPrefix(v, wantv))
				}
				if !ok {
					t.Errorf("README command %q: %q is %q, the README shows %q\n%s", l.cmd, key, fields[key], m[0], body)
				}
			}
			if id, ok := doc.(map[string]any)["id"].(string); ok && strings.HasPrefix(id, "s-") && vars["<id>"] == "" {
				vars["<id>"] = id
			}
		}
		if i := strings.Index(cmdline, "> "); i >= 0 {
			name := strings.Fields(cmdline[i+2:])[0]
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || len(b) == 0 {
				t.Fatalf("README command %q wrote no %s: %v", l.cmd, name, err)
			}
			if strings.HasSuffix(name, ".png") && !strings.HasPrefix(string(b), "\x89PNG") {
				t.Fatalf("README command %q: %s is not a PNG: %.40q", l.cmd, name, b)
			}
		}
	}
	if ran < 12 {
		t.Fatalf("ran only %d curl examples of the README", ran)
	}

	// The commands the README's text names inline, in the same directory
	// (`history import` reads the s.jsonl exported above), with deskgrid
	// on the PATH as well as in bin/.
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(deskgridBinary(t), filepath.Join(dir, "bin", "deskgrid")); err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"),
		"DESKGRID_ADDR="+p.grpc, "DESKGRID_DATA_DIR="+p.dataDir)
	inline := readmeInline(t)
	if len(inline) < 7 {
		t.Fatalf("found only %d inline commands in the README: %q", len(inline), inline)
	}
	var afterStop []string
	for _, line := range inline {
		if strings.HasPrefix(strings.TrimPrefix(line, "bin/"), "deskgrid gc") {
			afterStop = append(afterStop, line) // for a deskgrid that has stopped
			continue
		}
		cmdline := subst.Replace(line)
		if strings.HasPrefix(line, "deskgrid nodes ") {
			cmdline = strings.ReplaceAll(cmdline, "<id>", "local") // the node of deskgrid up
		}
		for k, v := range vars {
			cmdline = strings.ReplaceAll(cmdline, k, v)
		}
		if strings.Contains(cmdline, "<") && !strings.Contains(cmdline, "< ") {
			t.Fatalf("README command %q has a placeholder the test does not know", line)
		}
		runIn := dir
		if strings.Contains(line, "go run ./") {
			// As the README runs it, from the repository; its output
			// file goes to the test's directory.
			runIn = repo
			cmdline = strings.ReplaceAll(cmdline, " shot.png", " "+filepath.Join(dir, "shot.png"))
			os.Remove(filepath.Join(dir, "shot.png"))
		}
		cmd := exec.Command("bash", "-c", cmdline)
		cmd.Dir, cmd.Env = runIn, env
		out, err := cmd.CombinedOutput()
		if strings.HasSuffix(line, " -h") && cliExit(err) == 2 {
			err = nil // -h prints the flags and exits 2, as Go's flag package does
		}
		if err != nil {
			t.Fatalf("README command %q: %v\n%s", line, err, out)
		}
		switch {
		case strings.HasSuffix(line, "up -h"):
			for _, f := range []string{"-grpc-addr", "-http-addr", "-data-dir", "DESKGRID_HTTP_ADDR"} {
				if !strings.Contains(string(out), f) {
					t.Errorf("%q does not list %s:\n%s", line, f, out)
				}
			}
		case strings.HasSuffix(line, " help"):
			for _, c := range []string{"sessions", "history", "nodes", "keys"} {
				if !strings.Contains(string(out), c) {
					t.Errorf("%q does not list %s:\n%s", line, c, out)
				}
			}
		case strings.Contains(line, "go run ./"):
			if b, err := os.ReadFile(filepath.Join(dir, "shot.png")); err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
				t.Errorf("%q saved no PNG: %v\n%s", line, err, out)
			}
		case strings.Contains(line, "nodes drain"):
			if !strings.Contains(string(out), "draining") {
				t.Errorf("%q: %s", line, out)
			}
		case strings.Contains(line, "nodes undrain"):
			if !strings.Contains(string(out), "ready") {
				t.Errorf("%q: %s", line, out)
			}
		}
	}

	// gc, as the README says: refused while deskgrid runs on the data dir,
	// then run on what the stopped deskgrid left, with the same dirs.
	if len(afterStop) == 0 {
		t.Fatal("the README names no deskgrid gc command")
	}
	env = append(env, "DESKGRID_RUNTIME_DIR="+runDir)
	gc := func(line string) ([]byte, error) {
		cmd := exec.Command("bash", "-c", subst.Replace(line))
		cmd.Dir, cmd.Env = dir, env
		return cmd.CombinedOutput()
	}
	if out, err := gc(afterStop[0]); err == nil || !strings.Contains(string(out), "another deskgrid is running") {
		t.Errorf("README command %q while deskgrid runs: %v\n%s", afterStop[0], err, out)
	}
	p.stop()
	for _, line := range afterStop {
		if out, err := gc(line); err != nil {
			t.Fatalf("README command %q after deskgrid stopped: %v\n%s", line, err, out)
		}
	}
}

// TestREADMEGoSDK runs the README's Go SDK example, as written but for
// the address, inside a main function, against a real deskgrid.
func TestREADMEGoSDK(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, code, ok := strings.Cut(string(b), "\n```go\n")
	code, _, _ = strings.Cut(code, "```")
	imp, body, _ := strings.Cut(code, "\n\n")
	if !ok || !strings.HasPrefix(imp, "import ") || !strings.Contains(body, "deskgrid.New(") {
		t.Fatalf("no Go example in the README: %q", code)
	}
	body = strings.ReplaceAll(body, `"127.0.0.1:9090"`, fmt.Sprintf("%q", p.grpc))
	// The example's results, checked: it ignores its errors, as examples do.
	src := "package main\n\n" + imp + "\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\t\"os\"\n)\n\n" +
		"func main() {\n\tctx := context.Background()\n" + body +
		"\tif len(png) < 8 || string(png[1:4]) != \"PNG\" || res == nil || res.ExitCode != 0 || s.GetId() == \"\" {\n" +
		"\t\tfmt.Println(\"bad results\", len(png), res)\n\t\tos.Exit(1)\n\t}\n\tfmt.Println(\"ok\", s.GetId())\n}\n"
	// Built inside the examples module, which the workspace ties to the SDK
	// ("_": no ./... pattern sees it while it exists).
	dir, err := os.MkdirTemp("../../examples", "_readme-go-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DESKGRID_API_KEY="+p.key)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok s-") {
		t.Fatalf("the README's Go example: %v\n%s\n%s", err, out, src)
	}
	// It deleted its session.
	code2, list, _ := p.do("GET", "/v1/sessions", "")
	id := strings.TrimSpace(strings.TrimPrefix(string(out), "ok "))
	if code2 != http.StatusOK {
		t.Fatalf("list: %d %s", code2, list)
	}
	var l struct {
		Sessions []sessionJSON `json:"sessions"`
	}
	if err := json.Unmarshal(list, &l); err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Sessions {
		if s.ID == id && s.State == "SESSION_STATE_RUNNING" {
			t.Fatalf("the README's Go example left its session running: %s", list)
		}
	}
}

// readmeInline returns the commands the README's prose shows in code
// spans (`deskgrid ...`, `bin/deskgrid ...`, `go run ./...`), but for
// those that start a server: `deskgrid up` is the deskgrid under test,
// `deskgrid serve` a cluster role (cluster_test.go), `deskgrid mcp` an MCP
// server on stdio (mcp_test.go).
func readmeInline(t *testing.T) []string {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	span := regexp.MustCompile("`([^`\n]+)`")
	var out []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if in || strings.HasPrefix(line, "|") {
			continue // blocks; and tables, which name flags and make targets
		}
		for _, m := range span.FindAllStringSubmatch(line, -1) {
			c := m[1]
			if !strings.HasPrefix(c, "deskgrid ") && !strings.HasPrefix(c, "bin/deskgrid ") && !strings.Contains(c, "go run ./") {
				continue
			}
			switch strings.TrimPrefix(c, "bin/") {
			case "deskgrid up", "deskgrid mcp", "deskgrid serve <role>":
				continue
			}
			out = append(out, c)
		}
	}
	return out
}
