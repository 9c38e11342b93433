package agent

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
)

func TestBaseURLRules(t *testing.T) {
	rules, err := parseBaseURLRules([]string{"https://api.anthropic.com", "http://proxy.internal:8080/llm/", "http://127.0.0.1:*"})
	if err != nil {
		t.Fatal(err)
	}
	for raw, want := range map[string]bool{
		"https://api.anthropic.com":               true,
		"https://API.anthropic.com:443/v1":        true,
		"http://api.anthropic.com":                false, // scheme
		"https://api.anthropic.com:8443":          false, // port
		"https://api.anthropic.com.evil.test":     false, // host suffix
		"http://proxy.internal:8080/llm":          true,
		"http://proxy.internal:8080/llm/v1":       true,
		"http://proxy.internal:8080/llmx":         false, // path prefix on a segment only
		"http://proxy.internal:8080/":             false,
		"http://127.0.0.1:41234":                  true,
		"http://127.0.0.2:41234":                  false,
		"http://169.254.169.254/latest/meta-data": false,
	} {
		u, err := parseBaseURL(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		got := false
		for _, r := range rules {
			got = got || r.allows(u)
		}
		if got != want {
			t.Errorf("%s allowed = %v, want %v", raw, got, want)
		}
	}
	for _, bad := range []string{"ftp://x", "https://user:pw@api.anthropic.com", "https://", "https://h?x=1", "unix:///run/x.sock"} {
		if _, err := parseBaseURLRules([]string{bad}); err == nil {
			t.Errorf("rule %q accepted", bad)
		}
	}
}

// A run's base_url may point the agent service only at the providers' own
// hosts or at what the operator lists: internal services and link-local
// metadata addresses are refused at create, and nothing is stored.
func TestRunBaseURLMustBeAllowed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BaseURLs = map[string]string{"anthropic": "http://10.0.0.7:9000"}
	h := newHarness(t, cfg, nil)
	ctx := context.Background()
	for _, base := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://127.0.0.1:6379",
		"http://[::1]:9090",
		"http://localhost:8080/v1",
		"https://api.anthropic.com.attacker.test",
		"file:///etc/passwd",
	} {
		_, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", Provider: "anthropic", Model: "m", ApiKey: "k-123456", BaseUrl: base})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "-provider-base-urls") {
			t.Errorf("base_url %s: %v, want InvalidArgument naming -provider-base-urls", base, err)
		}
	}
	runs, err := h.client.ListRuns(ctx, &agentv1.ListRunsRequest{SessionId: "s-1"})
	if err != nil || len(runs.GetRuns()) != 0 {
		t.Fatalf("refused runs were stored: %v, %v", runs, err)
	}
	// The operator's own base URL for the provider is allowed.
	if _, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", Provider: "anthropic", Model: "m", ApiKey: "k-123456", BaseUrl: "http://10.0.0.7:9000"}); status.Code(err) == codes.InvalidArgument {
		t.Fatalf("the operator's base URL: %v", err)
	}
}

func TestProviderBaseURLsRefusesBadRules(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ProviderBaseURLs = []string{"gopher://x"}
	if _, err := New(context.Background(), cfg, Deps{}); err == nil {
		t.Fatal("a bad rule was accepted")
	}
}
