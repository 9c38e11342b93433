package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
)

// Attacks at the API's edges of `deskgrid up`: riding another key's MCP
// session, flooding gRPC, oversized input, and secrets given as flags.
func TestEndToEndEdgeAttacks(t *testing.T) {
	dataDir := t.TempDir()
	secret := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	p := startUp(t, dataDir, t.TempDir(), "-auth", "-auth-cache-ttl", "100ms", "-secret-key", secret)
	key, err := os.ReadFile(filepath.Join(dataDir, adminKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	a := &authedUp{upProcess: p, admin: strings.TrimSpace(string(key))}

	t.Run("secret flag warned", func(t *testing.T) {
		if !strings.Contains(a.logs.String(), "-secret-key was given on the command line") || !strings.Contains(a.logs.String(), "DESKGRID_SECRET_KEY") {
			t.Fatalf("no warning for -secret-key:\n%s", a.logs)
		}
	})

	victimSession := a.create(a.admin)
	if code, body := a.call(a.admin, "POST", "/v1/sessions/"+victimSession+"/files:write", `{"path":"secret.txt","content":"`+b64("top secret")+`"}`); code != 200 {
		t.Fatalf("victim write: %d %s", code, body)
	}

	t.Run("MCP session riding", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs := mcpOverHTTP(t, ctx, a.httpURL, a.admin)
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"session_id": victimSession, "path": "secret.txt"}}); err != nil || res.IsError {
			t.Fatalf("victim's own MCP read: %v %v", err, res)
		}
		a.cli("tenants", "create", "mallory")
		attacker := a.cli("keys", "create", "-tenant", "mallory", "-scopes", "read,write")
		reader := a.cli("keys", "create", "-scopes", "read", "-name", "reader")
		for name, k := range map[string]string{"another tenant": attacker, "a read key of the tenant": reader} {
			for tool, args := range map[string]map[string]any{
				"read_file":      {"session_id": victimSession, "path": "secret.txt"},
				"write_file":     {"session_id": victimSession, "path": "secret.txt", "content": "pwned"},
				"run_command":    {"session_id": victimSession, "command": "id"},
				"delete_session": {"session_id": victimSession},
			} {
				body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
				req, _ := http.NewRequest("POST", a.httpURL+"/mcp", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Mcp-Session-Id", cs.ID())
				req.Header.Set("Authorization", "Bearer "+k)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				_, _ = out.ReadFrom(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound || strings.Contains(out.String(), "top secret") {
					t.Errorf("%s riding the victim's MCP session with %s: %d %s", name, tool, resp.StatusCode, out.String())
				}
			}
		}
		code, body := a.call(a.admin, "GET", "/v1/sessions/"+victimSession+"/files:read?path=secret.txt", "")
		if code != 200 || !strings.Contains(string(body), b64("top secret")) {
			t.Fatalf("victim's file after the attacks: %d %s", code, body)
		}
	})

	t.Run("oversized input is 400", func(t *testing.T) {
		for _, at := range []struct{ method, path, body string }{
			{"GET", "/v1/sessions/" + victimSession + "/files:read?path=" + strings.Repeat("a", 5000), ""},
			{"POST", "/v1/sessions/" + victimSession + "/files:write", `{"path":"` + strings.Repeat("b", 300) + `","content":""}`},
			{"POST", "/v1/sessions/" + victimSession + ":exec", `{"argv":["echo","` + strings.Repeat("c", 200_000) + `"]}`},
		} {
			if code, body := a.call(a.admin, at.method, at.path, at.body); code != http.StatusBadRequest || !strings.Contains(string(body), "at most") {
				t.Errorf("%s %.80s: %d %.300s", at.method, at.path, code, body)
			}
		}
	})

	t.Run("gRPC flood", func(t *testing.T) {
		flooder := a.cli("keys", "create", "-scopes", "read", "-name", "flooder")
		conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.KeyCredentials(flooder)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := sessionv1.NewSessionServiceClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var refused int
		var info *errdetails.RetryInfo
		for range 1000 {
			_, err := c.ListSessions(ctx, &sessionv1.ListSessionsRequest{})
			if status.Code(err) == codes.ResourceExhausted {
				refused++
				for _, d := range status.Convert(err).Details() {
					if ri, ok := d.(*errdetails.RetryInfo); ok {
						info = ri
					}
				}
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if refused == 0 || info == nil || info.GetRetryDelay().AsDuration() <= 0 {
			t.Fatalf("1,000 ListSessions with one key: %d refused, RetryInfo %v", refused, info)
		}
		// Another key is not held back by the flooder.
		if code, body := a.call(a.admin, "GET", "/v1/sessions", ""); code != 200 {
			t.Fatalf("another key after the flood: %d %s", code, body)
		}
	})
}
