package main

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/auth/viewer"
)

// A viewer link revoked through one gateway of a cluster is refused by
// every other gateway: the revocation lives in Redis, not in the memory of
// the gateway that took it.
func TestViewerRevocationReachesEveryGateway(t *testing.T) {
	_, prefix := redisPrefix(t)
	secret := make([]byte, 32)
	copy(secret, "one viewer key of this cluster..")
	viewerKeys := "k1:" + base64.StdEncoding.EncodeToString(secret)
	internal := "internal-" + randomHex(16)
	dataDir := t.TempDir()
	gateway := func() string {
		cfg := &serverConfig{
			HTTPAddr: "127.0.0.1:0", DataDir: dataDir, RedisURL: testRedisURL(), RedisPrefix: prefix,
			SessionAddr: freeAddr(t), AgentAddr: freeAddr(t), HistoryAddr: freeAddr(t),
			Auth: true, InternalToken: internal, ViewerKeys: viewerKeys,
			LogFormat: "text", LogLevel: "warn", ShutdownTimeout: 5 * time.Second,
		}
		s, err := newSetup(context.Background(), "gateway", cfg, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.shutdown() })
		addr, err := s.startGateway(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return "http://" + addr
	}
	one, other := gateway(), gateway()

	// A link as any gateway of the cluster would sign it.
	keys, err := viewer.ParseKeys(viewerKeys)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := viewer.New(viewer.Config{Keys: keys}, viewer.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := iss.IssueViewerToken("s-1", "acme", viewer.ModeView, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Opens the live view as a WebSocket client would; a link that is
	// let through goes on to the node (absent here), so only the refusal
	// of the link itself answers 401.
	client := &http.Client{Timeout: 10 * time.Second}
	open := func(gw string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, gw+"/v1/sessions/s-1/vnc?token="+url.QueryEscape(tok), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString([]byte("sixteen byte key")))
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return resp.StatusCode, ""
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := open(other); code == http.StatusUnauthorized {
		t.Fatalf("the link is refused before its revocation: %d %s", code, body)
	}
	req, err := http.NewRequest(http.MethodDelete, one+"/v1/viewerTokens/"+url.PathEscape(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+internal)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke through one gateway: %d %s", resp.StatusCode, b)
	}
	for name, gw := range map[string]string{"the gateway that revoked it": one, "another gateway": other} {
		if code, body := open(gw); code != http.StatusUnauthorized || !strings.Contains(body, "revoked") {
			t.Errorf("a revoked link through %s: %d %s", name, code, body)
		}
	}
}
