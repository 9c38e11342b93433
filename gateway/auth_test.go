package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc/metadata"

	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/ratelimit"
	"github.com/deskgrid/deskgrid/services/platform/auth/viewer"
)

// memKeys is a KeySource in memory: the verifier is real, the store small.
type memKeys struct {
	mu   sync.Mutex
	keys map[string]auth.KeyRecord
}

func (m *memKeys) LookupKey(_ context.Context, id string) (auth.KeyRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.keys[id]; ok {
		return r, nil
	}
	return auth.KeyRecord{}, auth.ErrKeyNotFound
}

func (m *memKeys) TouchKey(context.Context, string, time.Time) error { return nil }

func (m *memKeys) add(tenant string, scopes ...auth.Scope) string {
	plain, id, hash := auth.NewKey()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[id] = auth.KeyRecord{ID: id, Tenant: tenant, Hash: hash, Scopes: scopes}
	return plain
}

const testInternalToken = "internal-token-for-tests"

// authed is a gateway with authentication on, in front of backends that
// check the forwarded keys themselves, and the keys to call it with.
type authed struct {
	*harness
	issuer *viewer.Issuer
	clock  *atomic.Int64 // the issuer's clock, unix nanoseconds
	// keys of tenant "default" (which owns every fake session) and of
	// another tenant.
	writeKey, readKey, otherKey string
	tenants                     chan string // the tenant of each ConnectVNC the gateway opened
}

func newAuthed(t *testing.T, cfg Config, deps Deps) *authed {
	t.Helper()
	keys := &memKeys{keys: map[string]auth.KeyRecord{}}
	a := &authed{clock: &atomic.Int64{}, tenants: make(chan string, 100)}
	a.clock.Store(time.Now().UnixNano())
	a.writeKey = keys.add("default", auth.ScopeWrite)
	a.readKey = keys.add("default", auth.ScopeRead)
	a.otherKey = keys.add("other", auth.ScopeWrite)
	vc := auth.DefaultVerifierConfig()
	vc.InternalToken = testInternalToken
	deps.Verifier = auth.NewVerifier(keys, vc, nil)
	var err error
	a.issuer, err = viewer.New(viewer.Config{
		Keys: []viewer.SigningKey{viewer.NewSigningKey("k1")},
		Now:  func() time.Time { return time.Unix(0, a.clock.Load()) },
	}, viewer.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	deps.Viewer = a.issuer
	// What the lead wires: the internal token acting for the tenant.
	deps.NodeCredentials = func(ctx context.Context, tenant string) context.Context {
		a.tenants <- tenant
		return metadata.AppendToOutgoingContext(ctx, auth.AuthorizationMD, "Bearer "+testInternalToken, auth.TenantMD, tenant)
	}
	a.harness = newHarness(t, cfg, deps)
	return a
}

func (a *authed) advance(d time.Duration) { a.clock.Add(int64(d)) }

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func call(t *testing.T, method, url, key, body string, hdr map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// A stream that opened: its first event is enough.
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		raw = buf[:n]
	} else {
		raw, _ = io.ReadAll(resp.Body)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func TestAuthOnEveryAPIRoute(t *testing.T) {
	mcpHit := atomic.Int32{}
	mcp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mcpHit.Add(1)
		writeJSON(w, 200, map[string]any{"jsonrpc": "2.0"})
	})
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("# metrics\n")) })
	a := newAuthed(t, DefaultConfig(), Deps{MCP: mcp, Metrics: metrics})
	u := a.srv.URL
	sse := map[string]string{"Accept": "text/event-stream"}
	tests := []struct {
		name         string
		method, path string
		key          string
		body         string
		hdr          map[string]string
		want         int
		message      string
	}{
		{"list without key", "GET", "/v1/sessions", "", "", nil, 401, "no credentials"},
		{"create without key", "POST", "/v1/sessions", "", "{}", nil, 401, "no credentials"},
		{"unknown route without key", "GET", "/v1/nothing", "", "", nil, 401, "no credentials"},
		{"MCP without key", "POST", "/mcp", "", "{}", nil, 401, "no credentials"},
		{"watch stream without key", "GET", "/v1/sessions/s-1:watch", "", "", sse, 401, "no credentials"},
		{"run events stream without key", "GET", "/v1/runs/r-1/events", "", "", sse, 401, "no credentials"},
		{"viewer token without key", "POST", "/v1/sessions/s-1/viewerToken", "", "{}", nil, 401, "no credentials"},
		{"revocation without key", "DELETE", "/v1/viewerTokens/abc", "", "", nil, 401, "no credentials"},
		{"made-up key", "GET", "/v1/sessions", "dg_0123456789abcdef_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "", nil, 401, "not recognised"},
		{"garbage key", "GET", "/v1/sessions", "hunter2", "", nil, 401, "malformed"},
		{"read key creates", "POST", "/v1/sessions", a.readKey, "{}", nil, 403, `lacks the "write" scope`},
		{"read key deletes", "DELETE", "/v1/sessions/s-1", a.readKey, "", nil, 403, `lacks the "write" scope`},
		{"read key lists", "GET", "/v1/sessions", a.readKey, "", nil, 200, ""},
		{"read key uses MCP", "POST", "/mcp", a.readKey, "{}", nil, 200, ""},
		{"read key asks who holds the input lease", "GET", "/v1/sessions/s-1/inputLease", a.readKey, "", nil, 200, ""},
		{"read key acquires the input lease", "POST", "/v1/sessions/s-1/inputLease:acquire", a.readKey, `{"holder":"x"}`, nil, 403, `lacks the "write" scope`},
		{"write key gets", "GET", "/v1/sessions/s-1", a.writeKey, "", nil, 200, ""},
		{"write key watches", "GET", "/v1/sessions/s-1:watch", a.writeKey, "", sse, 200, ""},
		{"another tenant's session", "GET", "/v1/sessions/s-1", a.otherKey, "", nil, 404, "session s-1 not found"},
		{"health", "GET", "/healthz", "", "", nil, 200, ""},
		{"readiness", "GET", "/readyz", "", "", nil, 200, ""},
		{"metrics open by default", "GET", "/metrics", "", "", nil, 200, ""},
		{"index", "GET", "/v1", "", "", nil, 200, ""},
		{"page", "GET", "/", "", "", nil, 200, ""},
		{"session page", "GET", "/sessions/s-1", "", "", nil, 200, ""},
		{"script", "GET", "/static/api.js", "", "", nil, 200, ""},
		{"OpenAPI document", "GET", "/openapi.json", "", "", nil, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := call(t, tt.method, u+tt.path, tt.key, tt.body, tt.hdr)
			if r.status != tt.want {
				t.Fatalf("%s %s: %d %.200s, want %d", tt.method, tt.path, r.status, r.raw, tt.want)
			}
			if tt.want >= 400 {
				if !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
					t.Errorf("content type %q", r.header.Get("Content-Type"))
				}
				if msg, _ := r.body["message"].(string); !strings.Contains(msg, tt.message) || r.body["code"] == nil {
					t.Errorf("body %s, want a message with %q", r.raw, tt.message)
				}
			}
			if tt.want == 401 && !strings.Contains(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
			}
		})
	}
	if n := mcpHit.Load(); n != 1 {
		t.Errorf("the MCP handler ran %d times, want once (for the read key)", n)
	}
	idx := call(t, "GET", u+"/v1", "", "", nil)
	if idx.body["auth"] != true || idx.body["viewer_tokens"] != true {
		t.Errorf("index %s: want auth and viewer_tokens true", idx.raw)
	}
}

func TestAuthOffIndex(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	r := call(t, "GET", h.srv.URL+"/v1", "", "", nil)
	if r.body["auth"] != false || r.body["viewer_tokens"] != false {
		t.Errorf("index %s: want auth and viewer_tokens false", r.raw)
	}
	if r := call(t, "POST", h.srv.URL+"/v1/sessions/s-1/viewerToken", "", "{}", nil); r.status != http.StatusNotImplemented {
		t.Errorf("viewer token without an issuer: %d %s", r.status, r.raw)
	}
}

func TestAuthNeedsViewerIssuer(t *testing.T) {
	keys := &memKeys{keys: map[string]auth.KeyRecord{}}
	conn := newHarness(t, DefaultConfig(), Deps{}).gw.deps.Backends.Session
	_, err := New(context.Background(), DefaultConfig(), Deps{
		Backends: Backends{Session: conn, Node: conn, Agent: conn, History: conn},
		Verifier: auth.NewVerifier(keys, auth.VerifierConfig{}, nil),
	})
	if err == nil || !strings.Contains(err.Error(), "viewer token issuer") {
		t.Fatalf("New with a verifier and no viewer issuer: %v", err)
	}
}

func TestMetricsBehindKey(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("# metrics\n")) })
	a := newAuthed(t, DefaultConfig(), Deps{Metrics: metrics, MetricsNeedKey: true})
	if r := call(t, "GET", a.srv.URL+"/metrics", "", "", nil); r.status != 401 {
		t.Errorf("metrics without key: %d", r.status)
	}
	if r := call(t, "GET", a.srv.URL+"/metrics", a.readKey, "", nil); r.status != 200 || r.raw != "# metrics\n" {
		t.Errorf("metrics with key: %d %q", r.status, r.raw)
	}
	if r := call(t, "GET", a.srv.URL+"/healthz", "", "", nil); r.status != 200 {
		t.Errorf("health: %d", r.status)
	}
}

func TestRateLimit(t *testing.T) {
	lim, err := ratelimit.New(ratelimit.Deps{Counter: ratelimit.NewMemory(ratelimit.Config{Rate: 0.01, Burst: 2}), Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	a := newAuthed(t, DefaultConfig(), Deps{RateLimit: lim})
	for i := range 2 {
		if r := call(t, "GET", a.srv.URL+"/v1/sessions", a.readKey, "", nil); r.status != 200 {
			t.Fatalf("request %d: %d %s", i, r.status, r.raw)
		}
	}
	r := call(t, "GET", a.srv.URL+"/v1/sessions", a.readKey, "", nil)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("third request: %d %s", r.status, r.raw)
	}
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
	}
	if msg, _ := r.body["message"].(string); !strings.Contains(msg, "rate limit exceeded") {
		t.Errorf("body %s", r.raw)
	}
	// Another key has its own bucket; probes are never limited.
	if r := call(t, "GET", a.srv.URL+"/v1/sessions", a.writeKey, "", nil); r.status != 200 {
		t.Errorf("another key: %d", r.status)
	}
	for range 5 {
		if r := call(t, "GET", a.srv.URL+"/healthz", "", "", nil); r.status != 200 {
			t.Fatalf("health: %d", r.status)
		}
	}
}

// issue asks for a viewer token and returns the reply.
func (a *authed) issue(t *testing.T, key, session, body string) reply {
	t.Helper()
	return call(t, "POST", a.srv.URL+"/v1/sessions/"+session+"/viewerToken", key, body, nil)
}

func (a *authed) mustIssue(t *testing.T, key, session, mode string) (token, tokenID, url string) {
	t.Helper()
	r := a.issue(t, key, session, `{"mode":"`+mode+`","ttl_seconds":120}`)
	if r.status != 200 {
		t.Fatalf("issue %s token: %d %s", mode, r.status, r.raw)
	}
	return r.body["token"].(string), r.body["tokenId"].(string), r.body["url"].(string)
}

func TestViewerTokenIssue(t *testing.T) {
	a := newAuthed(t, DefaultConfig(), Deps{})
	r := a.issue(t, a.readKey, "s-1", `{"mode":"view","ttl_seconds":120}`)
	if r.status != 200 {
		t.Fatalf("issue: %d %s", r.status, r.raw)
	}
	tok, _ := r.body["token"].(string)
	c, err := a.issuer.VerifyViewerToken(context.Background(), tok, "s-1")
	if err != nil || c.Mode != viewer.ModeView || c.Tenant != "default" || c.TokenID != r.body["tokenId"] {
		t.Fatalf("token claims %+v: %v", c, err)
	}
	exp, err := time.Parse(time.RFC3339, r.body["expireTime"].(string))
	if err != nil || !exp.Equal(c.Expiry) || r.body["mode"] != "view" || r.body["sessionId"] != "s-1" {
		t.Errorf("reply %s", r.raw)
	}
	if want := "/v1/sessions/s-1/vnc?token=" + tok; r.body["url"] != want {
		t.Errorf("url %v, want %s", r.body["url"], want)
	}

	tests := []struct {
		name, key, session, body string
		want                     int
		message                  string
	}{
		{"view by default", a.readKey, "s-1", ``, 200, ""},
		{"camelCase TTL", a.readKey, "s-1", `{"ttlSeconds":60}`, 200, ""},
		{"control with a write key", a.writeKey, "s-1", `{"mode":"control"}`, 200, ""},
		{"control with a read key", a.readKey, "s-1", `{"mode":"control"}`, 403, `needs a key with the "write" scope`},
		{"another tenant", a.otherKey, "s-1", `{"mode":"view"}`, 404, "session s-1 not found"},
		{"unknown session", a.writeKey, "s-404", `{"mode":"view"}`, 404, "session s-404 not found"},
		{"bad mode", a.writeKey, "s-1", `{"mode":"admin"}`, 400, `mode must be "view" or "control"`},
		{"unknown field", a.writeKey, "s-1", `{"mode":"view","session":"s-2"}`, 400, "unknown field"},
		{"negative TTL", a.writeKey, "s-1", `{"ttl_seconds":-1}`, 400, "ttl_seconds must be positive"},
		{"not JSON", a.writeKey, "s-1", `mode=view`, 400, "body must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := a.issue(t, tt.key, tt.session, tt.body)
			if r.status != tt.want {
				t.Fatalf("%d %s, want %d", r.status, r.raw, tt.want)
			}
			if msg, _ := r.body["message"].(string); tt.want != 200 && !strings.Contains(msg, tt.message) {
				t.Errorf("message %q, want %q", msg, tt.message)
			}
		})
	}
	// The TTL asked for is capped by the issuer's maximum.
	r = a.issue(t, a.readKey, "s-1", `{"ttl_seconds":86400}`)
	exp, _ = time.Parse(time.RFC3339, r.body["expireTime"].(string))
	if max := time.Unix(0, a.clock.Load()).Add(time.Hour + time.Second); r.status != 200 || exp.After(max) {
		t.Errorf("a day's TTL: %d, expires %v", r.status, exp)
	}
}

func vncRefusal(t *testing.T, a *authed, path string, hdr http.Header) (int, string) {
	t.Helper()
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("Origin", a.srv.URL)
	_, resp, err := dialVNC(t, a.harness, path, hdr)
	if err == nil {
		t.Fatalf("upgrade of %s accepted", path)
	}
	if resp == nil {
		t.Fatalf("no reply: %v", err)
	}
	var body struct {
		Message string `json:"message"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Message
}

func TestVNCTakesViewerTokensOnly(t *testing.T) {
	a := newAuthed(t, DefaultConfig(), Deps{})
	a.display.addDisplay("s-2")
	a.sessions.mu.Lock()
	a.sessions.byID["s-2"] = a.sessions.newSession("s-2", nil)
	a.sessions.mu.Unlock()
	viewTok, _, viewURL := a.mustIssue(t, a.readKey, "s-1", "view")
	otherTok, _, _ := a.mustIssue(t, a.readKey, "s-2", "view")

	// A view token watches, whatever the viewer asks for.
	if _, _, err := dialVNC(t, a.harness, viewURL+"&view_only=false", nil); err != nil {
		t.Fatal(err)
	}
	if first := a.display.lastFirst(); first.GetSessionId() != "s-1" || !first.GetViewOnly() {
		t.Errorf("view token opened %v", first)
	}
	// The node was called as the system acting for the token's tenant.
	if got := <-a.tenants; got != "default" {
		t.Errorf("node credentials for tenant %q", got)
	}
	a.display.mu.Lock()
	caller := a.display.callers[len(a.display.callers)-1]
	a.display.mu.Unlock()
	if !caller.System || caller.Tenant != "default" {
		t.Errorf("the display saw caller %+v", caller)
	}
	// A control token controls.
	_, _, controlURL := a.mustIssue(t, a.writeKey, "s-1", "control")
	if _, _, err := dialVNC(t, a.harness, controlURL, nil); err != nil {
		t.Fatal(err)
	}
	if first := a.display.lastFirst(); first.GetViewOnly() {
		t.Errorf("control token opened %v", first)
	}
	// A viewer token in the Authorization header works too.
	if _, _, err := dialVNC(t, a.harness, "/v1/sessions/s-1/vnc", http.Header{"Origin": {a.srv.URL}, "Authorization": {"Bearer " + viewTok}}); err != nil {
		t.Fatal(err)
	}

	reached := len(a.display.firstSig)
	tests := []struct {
		name    string
		path    string
		hdr     http.Header
		want    int
		message string
	}{
		{"nothing", "/v1/sessions/s-1/vnc", nil, 401, "no viewer token"},
		{"an API key in the header", "/v1/sessions/s-1/vnc", http.Header{"Authorization": {"Bearer " + a.writeKey}}, 401, "not an API key"},
		{"an API key as the token", "/v1/sessions/s-1/vnc?token=" + a.writeKey, nil, 401, "malformed"},
		{"the internal token", "/v1/sessions/s-1/vnc", http.Header{"Authorization": {"Bearer " + testInternalToken}}, 401, "no viewer token"},
		{"another session's token", "/v1/sessions/s-1/vnc?token=" + otherTok, nil, 403, "another session"},
		{"a forged token", "/v1/sessions/s-1/vnc?token=" + viewTok[:len(viewTok)-2] + "AA", nil, 401, "signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, msg := vncRefusal(t, a, tt.path, tt.hdr)
			if code != tt.want || !strings.Contains(msg, tt.message) {
				t.Fatalf("%d %q, want %d with %q", code, msg, tt.want, tt.message)
			}
		})
	}
	if got := len(a.display.firstSig); got != reached {
		t.Errorf("refused upgrades reached the node %d times", got-reached)
	}

	// Expired: refused.
	a.advance(3 * time.Minute)
	if code, msg := vncRefusal(t, a, viewURL, nil); code != 401 || !strings.Contains(msg, "expired") {
		t.Errorf("expired token: %d %q", code, msg)
	}
}

func TestViewerTokenRevocation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ViewerRecheck = 20 * time.Millisecond
	a := newAuthed(t, cfg, Deps{})
	tok, id, u := a.mustIssue(t, a.writeKey, "s-1", "control")
	c, _, err := dialVNC(t, a.harness, u, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Another tenant cannot revoke it, by id or by the token; a read key
	// cannot revoke a control token.
	for _, ref := range []string{id, tok} {
		if r := call(t, "DELETE", a.srv.URL+"/v1/viewerTokens/"+ref, a.otherKey, "", nil); r.status != 404 {
			t.Errorf("another tenant revokes: %d %s", r.status, r.raw)
		}
	}
	if r := call(t, "DELETE", a.srv.URL+"/v1/viewerTokens/"+id, a.readKey, "", nil); r.status != 403 {
		t.Errorf("read key revokes a control token: %d %s", r.status, r.raw)
	}
	if r := call(t, "DELETE", a.srv.URL+"/v1/viewerTokens/0123", a.writeKey, "", nil); r.status != 404 {
		t.Errorf("unknown id: %d %s", r.status, r.raw)
	}
	r := call(t, "DELETE", a.srv.URL+"/v1/viewerTokens/"+id, a.writeKey, "", nil)
	if r.status != 200 || r.body["revoked"] != true {
		t.Fatalf("revoke: %d %s", r.status, r.raw)
	}
	// The live view it opened ends, saying why.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, _, err = c.Read(ctx); err != nil {
			break
		}
	}
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Errorf("live view ended with %v, want a policy-violation close", err)
	}
	if code, msg := vncRefusal(t, a, u, nil); code != 401 || !strings.Contains(msg, "revoked") {
		t.Errorf("revoked token: %d %q", code, msg)
	}

	// Revoked elsewhere (another replica, through the shared revocation
	// store): the live view ends at the next check.
	tok2, _, u2 := a.mustIssue(t, a.readKey, "s-1", "view")
	c2, _, err := dialVNC(t, a.harness, u2, nil)
	if err != nil {
		t.Fatal(err)
	}
	c3, err := a.issuer.ParseViewerToken(tok2)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.issuer.RevokeViewerToken(context.Background(), c3.TokenID, c3.Expiry); err != nil {
		t.Fatal(err)
	}
	for {
		if _, _, err = c2.Read(ctx); err != nil {
			break
		}
	}
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Errorf("live view ended with %v, want a policy-violation close", err)
	}

	// Revoking by the token itself works on any replica; a view token
	// needs only read.
	tok3, _, u3 := a.mustIssue(t, a.readKey, "s-1", "view")
	if r := call(t, "DELETE", a.srv.URL+"/v1/viewerTokens/"+tok3, a.readKey, "", nil); r.status != 200 {
		t.Fatalf("revoke by token: %d %s", r.status, r.raw)
	}
	if code, _ := vncRefusal(t, a, u3, nil); code != 401 {
		t.Errorf("token revoked by itself still opens: %d", code)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}
