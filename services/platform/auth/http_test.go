package auth_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deskgrid/deskgrid/services/platform/auth"
)

func TestHTTPMiddleware(t *testing.T) {
	store := openStore(t)
	v := auth.NewVerifier(store, auth.VerifierConfig{InternalToken: internalToken}, nil)
	_, readKey := mustKey(t, store, "acme", auth.ScopeRead)
	_, writeKey := mustKey(t, store, "acme", auth.ScopeWrite)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := auth.FromContext(r.Context())
		if !ok {
			_, _ = io.WriteString(w, "open")
			return
		}
		_, _ = io.WriteString(w, p.Tenant+"|"+p.KeyID)
	})
	open := httptest.NewServer(auth.Middleware(v, auth.HTTPOptions{})(inner))
	t.Cleanup(open.Close)
	locked := httptest.NewServer(auth.Middleware(v, auth.HTTPOptions{MetricsNeedKey: true, OpenPaths: []string{"/healthz", "/readyz", "/vnc/"}})(inner))
	t.Cleanup(locked.Close)

	cases := []struct {
		name, base, method, path string
		header                   map[string]string
		code                     int
		body                     string
	}{
		{"healthz open", open.URL, "GET", "/healthz", nil, 200, "open"},
		{"readyz open", open.URL, "GET", "/readyz", nil, 200, "open"},
		{"metrics open by default", open.URL, "GET", "/metrics", nil, 200, "open"},
		{"metrics behind a key", locked.URL, "GET", "/metrics", nil, 401, "no credentials"},
		{"metrics with a key", locked.URL, "GET", "/metrics", map[string]string{"Authorization": "Bearer " + readKey}, 200, "acme|"},
		{"prefix open", locked.URL, "GET", "/vnc/s-1", nil, 200, "open"},
		{"prefix is not a substring match", locked.URL, "GET", "/vncx", nil, 401, ""},
		{"healthz subpath not open", open.URL, "GET", "/healthz/x", nil, 401, ""},
		{"mcp needs a key", open.URL, "POST", "/mcp", nil, 401, "no credentials"},
		{"garbage key", open.URL, "GET", "/mcp", map[string]string{"Authorization": "Bearer dg_x"}, 401, "malformed"},
		{"basic auth", open.URL, "GET", "/mcp", map[string]string{"Authorization": "Basic eDp5"}, 401, "Bearer"},
		{"read key reads", open.URL, "GET", "/mcp", map[string]string{"Authorization": "Bearer " + readKey}, 200, "acme|"},
		{"read key cannot post", open.URL, "POST", "/mcp", map[string]string{"Authorization": "Bearer " + readKey}, 403, "scope this request needs"},
		{"write key posts", open.URL, "POST", "/mcp", map[string]string{"Authorization": "Bearer " + writeKey}, 200, "acme|"},
		{"tenant header ignored for keys", open.URL, "GET", "/mcp", map[string]string{"Authorization": "Bearer " + readKey, auth.TenantMD: "victim"}, 200, "acme|"},
		{"internal token acts for a tenant", open.URL, "POST", "/mcp", map[string]string{"Authorization": "Bearer " + internalToken, auth.TenantMD: "beta"}, 200, "beta|system"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, c.base+c.path, nil)
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.code || !strings.Contains(string(b), c.body) {
				t.Fatalf("%d %s, want %d containing %q", resp.StatusCode, b, c.code, c.body)
			}
			if c.code == 401 {
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Fatal("401 without a challenge")
				}
				var e struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(b, &e); err != nil || e.Code != 16 || e.Message == "" {
					t.Fatalf("error body %s: %v", b, err)
				}
			}
		})
	}

	// Two Authorization headers are refused.
	req, _ := http.NewRequest("GET", open.URL+"/mcp", nil)
	req.Header.Add("Authorization", "Bearer "+readKey)
	req.Header.Add("Authorization", "Bearer "+internalToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("two headers: %d", resp.StatusCode)
	}
}
