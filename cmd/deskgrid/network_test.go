package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// A session asked with network gets a default route through user-mode
// networking; one without has only loopback. Neither reaches the node.
func TestEndToEndSessionNetwork(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	for _, tc := range []struct {
		body    string
		network bool
	}{{`{"display":{"width":320,"height":240},"network":true}`, true}, {`{"display":{"width":320,"height":240}}`, false}} {
		code, body, _ := p.do("POST", "/v1/sessions", tc.body)
		var s sessionJSON
		if err := json.Unmarshal(body, &s); err != nil || code != 200 {
			t.Fatalf("create: %d %s", code, body)
		}
		code, body, _ = p.do("POST", "/v1/sessions/"+s.ID+":exec", `{"argv":["cat","/proc/net/route"]}`)
		if code != 200 {
			t.Fatalf("exec: %d %s", code, body)
		}
		var out strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
			var m struct {
				Result struct {
					Stdout []byte `json:"stdout"`
				} `json:"result"`
			}
			_ = json.Unmarshal([]byte(line), &m)
			out.Write(m.Result.Stdout)
		}
		hasDefault := strings.Contains(out.String(), "tap0\t00000000")
		if hasDefault != tc.network {
			t.Fatalf("network=%v: routes\n%s", tc.network, out.String())
		}
		// The node's own gRPC port stays out of reach either way.
		port := strings.Split(p.grpc, ":")[1]
		code, body, _ = p.do("POST", "/v1/sessions/"+s.ID+":exec", `{"argv":["bash","-c","exec 3<>/dev/tcp/10.0.2.2/`+port+`"]}`)
		if code != 200 || !strings.Contains(string(body), `"exitCode"`) {
			t.Fatalf("network=%v: reached the node's port: %d %s", tc.network, code, body)
		}
	}
}
