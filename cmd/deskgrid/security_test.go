package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/auth"
)

// authedUp is `deskgrid up -auth` with the first admin key and helpers to
// call it as different keys.
type authedUp struct {
	*upProcess
	admin string
}

func startAuthedUp(t *testing.T) *authedUp {
	t.Helper()
	dataDir := t.TempDir()
	p := startUp(t, dataDir, t.TempDir(), "-auth", "-auth-cache-ttl", "100ms")
	key, err := os.ReadFile(filepath.Join(dataDir, adminKeyFile))
	if err != nil {
		t.Fatalf("the first API key was not kept: %v", err)
	}
	return &authedUp{upProcess: p, admin: strings.TrimSpace(string(key))}
}

// cli runs a deskgrid command with this deskgrid's data dir in its environment.
func (a *authedUp) cli(args ...string) string {
	a.t.Helper()
	cmd := exec.Command(deskgridBinary(a.t), args...)
	cmd.Env = append(os.Environ(), "DESKGRID_DATA_DIR="+a.dataDir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		a.t.Fatalf("deskgrid %v: %v\n%s%s", args, err, out.String(), errb.String())
	}
	return strings.TrimSpace(out.String())
}

func (a *authedUp) call(key, method, path, body string) (int, []byte) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.httpURL+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

func (a *authedUp) create(key string) string {
	a.t.Helper()
	code, body := a.call(key, "POST", "/v1/sessions", `{"display":{"width":640,"height":480}}`)
	var s sessionJSON
	if err := json.Unmarshal(body, &s); err != nil || code != 200 || s.State != "SESSION_STATE_RUNNING" {
		a.t.Fatalf("create: %d %s", code, body)
	}
	return s.ID
}

func TestEndToEndAuthentication(t *testing.T) {
	a := startAuthedUp(t)
	if !strings.Contains(a.logs.String(), a.admin) {
		t.Fatal("deskgrid up did not print the first key")
	}
	// Only health and readiness are open.
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := a.call("", "GET", path, ""); code != 200 {
			t.Fatalf("%s without a key: %d %s", path, code, body)
		}
	}
	unknown, _, _ := auth.NewKey()
	for _, c := range []struct{ key, want string }{{"", "no credentials"}, {"dg_nope", "malformed"}, {unknown, "not recognised"}} {
		code, body := a.call(c.key, "GET", "/v1/sessions", "")
		if code != http.StatusUnauthorized || !strings.Contains(strings.ToLower(string(body)), c.want) {
			t.Fatalf("key %q: %d %s", c.key, code, body)
		}
	}
	// Scopes: a read key lists but cannot create.
	readKey := a.cli("keys", "create", "-scopes", "read", "-name", "reader")
	if code, _ := a.call(readKey, "GET", "/v1/sessions", ""); code != 200 {
		t.Fatalf("read key cannot list: %d", code)
	}
	if code, body := a.call(readKey, "POST", "/v1/sessions", `{}`); code != http.StatusForbidden {
		t.Fatalf("read key created a session: %d %s", code, body)
	}
	// Revocation takes effect within the cache TTL.
	keyID := strings.Split(strings.TrimPrefix(readKey, "dg_"), "_")[0]
	a.cli("keys", "revoke", keyID)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := a.call(readKey, "GET", "/v1/sessions", "")
		if code == http.StatusUnauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked key still works: %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The CLI on this machine uses the key deskgrid up kept.
	out := a.cli("sessions", "list", "-addr", a.grpc)
	if !strings.Contains(out, "STATE") {
		t.Fatalf("CLI with the kept key: %q", out)
	}
}

// One tenant attacks another's session through every API surface; each
// attempt gets exactly what a session that does not exist gets, and the
// victim is unaffected.
func TestEndToEndTenantIsolation(t *testing.T) {
	a := startAuthedUp(t)
	victim := a.admin
	victimSession := a.create(victim)
	if code, body := a.call(victim, "POST", "/v1/sessions/"+victimSession+"/files:write", `{"path":"secret.txt","content":"`+b64("top secret")+`"}`); code != 200 {
		t.Fatalf("victim write: %d %s", code, body)
	}
	a.cli("tenants", "create", "mallory")
	attacker := a.cli("keys", "create", "-tenant", "mallory", "-scopes", "read,write")
	attackerSession := a.create(attacker)

	const ghost = "s-aaaaaaaaaaaaaaaaaaaa"
	attempts := []struct{ method, path, body string }{
		{"GET", "/v1/sessions/%s", ""},
		{"GET", "/v1/sessions/%s/screenshot", ""},
		{"GET", "/v1/sessions/%s/display", ""},
		{"POST", "/v1/sessions/%s/actions", `{"actions":[{"type":{"text":"pwned"}}]}`},
		{"POST", "/v1/sessions/%s:exec", `{"argv":["cat","secret.txt"]}`},
		{"GET", "/v1/sessions/%s/files:read?path=secret.txt", ""},
		{"GET", "/v1/sessions/%s/files", ""},
		{"POST", "/v1/sessions/%s/files:write", `{"path":"x","content":""}`},
		{"GET", "/v1/sessions/%s/changes", ""},
		{"POST", "/v1/sessions/%s/snapshots", `{}`},
		{"POST", "/v1/sessions/%s/shell:run", `{"command":"id"}`},
		{"GET", "/v1/sessions/%s/history", ""},
		{"GET", "/v1/sessions/%s/runs", ""},
		{"POST", "/v1/sessions/%s:keepalive", `{}`},
		{"DELETE", "/v1/sessions/%s", ""},
	}
	for _, at := range attempts {
		path := fmt.Sprintf(at.path, victimSession)
		code, body := a.call(attacker, at.method, path, at.body)
		gcode, _ := a.call(attacker, at.method, fmt.Sprintf(at.path, ghost), at.body)
		if code != gcode {
			t.Errorf("%s %s as another tenant: %d %s (a missing session gets %d)", at.method, path, code, body, gcode)
		}
		if strings.Contains(string(body), "top secret") || strings.Contains(string(body), victimSession+"\"") && code == 200 {
			t.Errorf("%s %s leaked: %s", at.method, path, body)
		}
	}
	// The node's image store counts every tenant's images and bytes: an
	// operator's figure, not a tenant's.
	if code, body := a.call(attacker, "GET", "/v1/images:usage", ""); code != 403 {
		t.Errorf("image usage as a tenant: %d %s", code, body)
	}
	if code, body := a.call(victim, "GET", "/v1/images:usage", ""); code != 200 {
		t.Errorf("image usage as an admin: %d %s", code, body)
	}
	// Listing shows only one's own.
	_, body := a.call(attacker, "GET", "/v1/sessions", "")
	if strings.Contains(string(body), victimSession) || !strings.Contains(string(body), attackerSession) {
		t.Errorf("attacker's list: %s", body)
	}
	// The victim is unaffected.
	code, body := a.call(victim, "GET", "/v1/sessions/"+victimSession, "")
	if code != 200 || !strings.Contains(string(body), "SESSION_STATE_RUNNING") {
		t.Fatalf("victim after the attacks: %d %s", code, body)
	}
	code, body = a.call(victim, "GET", "/v1/sessions/"+victimSession+"/files:read?path=secret.txt", "")
	if code != 200 || !strings.Contains(string(body), b64("top secret")) {
		t.Fatalf("victim's file after the attacks: %d %s", code, body)
	}

	// From inside its own sandbox, the attacker sees neither the victim's
	// files, processes, X display nor network.
	probes := []struct{ name, cmd string }{
		{"victim files by host path", "cat " + a.dataDir + "/sandbox/sandboxes/" + victimSession + "/merged/secret.txt"},
		{"victim files by search", "grep -rs 'top secret' /home /tmp /run /var /root"},
		{"victim processes", "ps -eo args | grep -v '^/usr/bin/bwrap\\|^bash\\|^ps\\|^grep\\|^COMMAND' | grep ."},
		{"victim X server", "ls /tmp/.X11-unix/ | grep -v \"^X${DISPLAY#:}$\""},
		{"host network", "exec 3<>/dev/tcp/127.0.0.1/" + strings.Split(a.grpc, ":")[1]},
		{"signal host processes", "kill -0 1 && ! grep -q bwrap /proc/1/cmdline"},
	}
	for _, p := range probes {
		code, body := a.call(attacker, "POST", "/v1/sessions/"+attackerSession+":exec", `{"argv":["bash","-c",`+jsonString(p.cmd)+`]}`)
		if code != 200 || !strings.Contains(string(body), `"exit"`) {
			t.Fatalf("%s: exec: %d %s", p.name, code, body)
		}
		// A zero exit code is left out of the JSON: a probe that failed has one.
		if strings.Contains(string(body), "top secret") || !strings.Contains(string(body), `"exitCode"`) {
			t.Errorf("%s succeeded from inside the attacker's sandbox: %s", p.name, body)
		}
	}
}

func b64(s string) string {
	b, _ := json.Marshal([]byte(s))
	return strings.Trim(string(b), `"`)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
