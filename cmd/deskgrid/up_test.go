package main

import (
	"net"
	"net/http"
	"testing"

	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
)

// TestUpServesOnItsOwnGRPCAddress runs deskgrid up with a gRPC address other
// than the default, written as a wildcard, and a non-default HTTP address:
// the gateway must reach the services on that listener (readiness and calls
// succeed), not dial the default port.
func TestUpServesOnItsOwnGRPCAddress(t *testing.T) {
	_, port, err := net.SplitHostPort(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	s := deskgridtest.Start(t, "-grpc-addr", ":"+port)
	req, _ := http.NewRequest("GET", s.HTTPURL+"/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+s.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("list sessions through the gateway: %s\n%s", resp.Status, s.Logs())
	}
}

func TestDialAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9091": "127.0.0.1:9091",
		"0.0.0.0:9091":   "127.0.0.1:9091",
		"[::]:9091":      "127.0.0.1:9091",
		"[::1]:9091":     "[::1]:9091",
		"10.1.2.3:9091":  "10.1.2.3:9091",
	} {
		a, err := net.ResolveTCPAddr("tcp", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := dialAddr(a); got != want {
			t.Errorf("dialAddr(%s) = %s, want %s", in, got, want)
		}
	}
}
