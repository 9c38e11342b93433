package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
)

func TestNetworkOnlyWhenAsked(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "offline", "")
	resp, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "online", Network: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "online"}) })
	if !resp.GetSandbox().GetNetwork() {
		t.Errorf("sandbox does not report its network: %v", resp.GetSandbox())
	}

	// A listener on every host address: the sandbox must reach none of them.
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	port := l.Addr().(*net.TCPAddr).Port
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	hosts, err := jail.HostAddrs()
	if err != nil || len(hosts) == 0 {
		t.Fatalf("this host has no non-loopback address to test with: %v", err)
	}
	script := `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' '; echo; ip -4 -o addr show tap0 2>/dev/null | awk '{print $4}'; `
	for _, a := range []string{"127.0.0.1", "10.0.2.2", hosts[0].String()} {
		script += fmt.Sprintf(`timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%d' 2>/dev/null && echo "reached %s"; `, a, port, a)
	}
	script += "true"

	on := h.mustExec(t, "online", "bash", "-c", script)
	if want := "lo tap0 \n10.0.2.100/24\n"; on.stdout != want {
		t.Errorf("with network: %q, want %q (stderr %q)", on.stdout, want, on.stderr)
	}
	route := h.mustExec(t, "online", "cat", "/proc/net/route")
	if !strings.Contains(route.stdout, "tap0\t00000000\t0202000A") {
		t.Errorf("no default route through 10.0.2.2: %s", route.stdout)
	}
	off := h.mustExec(t, "offline", "bash", "-c", script)
	if want := "lo \n"; off.stdout != want {
		t.Errorf("without network: %q, want %q", off.stdout, want)
	}
	select {
	case <-accepted:
		t.Error("a sandbox reached a host service")
	default:
	}

	// slirp4netns ends with each command.
	if n := slirpChildren(t); n > 0 {
		t.Errorf("%d slirp4netns still running", n)
	}

	// The persistent shell and started programs have network too, for as
	// long as they run.
	sh, err := h.client.RunShell(ctx, &sandboxv1.RunShellRequest{SessionId: "online", Command: "ip -4 -o addr show tap0 | awk '{print $4}'"})
	if err != nil || string(sh.GetOutput()) != "10.0.2.100/24\n" {
		t.Fatalf("shell: %q %v", sh.GetOutput(), err)
	}
	p, err := h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: "online", Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := slirpChildren(t); n != 2 {
		t.Errorf("%d slirp4netns for a shell and a program, want 2", n)
	}
	if _, err := h.client.StopProcess(ctx, &sandboxv1.StopProcessRequest{SessionId: "online", ProcessId: p.GetProcess().GetProcessId()}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return slirpChildren(t) == 1 }, "the program's slirp4netns to end")
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "online"}); err != nil {
		t.Fatal(err)
	}
	if n := slirpChildren(t); n != 0 {
		t.Errorf("%d slirp4netns left after delete", n)
	}
}

// slirpChildren counts this process's slirp4netns children: other test
// binaries may run their own at the same time.
func slirpChildren(t testing.TB) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		s := string(status)
		if strings.HasPrefix(s, "Name:\tslirp4netns\n") && strings.Contains(s, fmt.Sprintf("\nPPid:\t%d\n", os.Getpid())) {
			n++
		}
	}
	return n
}

func TestNetworkWithoutSlirpIsUnavailable(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)
	cfg.SlirpPath = "/nonexistent/slirp4netns"
	h := newHarness(t, cfg, Deps{})
	if _, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "online", Network: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "online"}) })
	_, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "online", Argv: []string{"true"}})
	wantCode(t, err, codes.Unavailable)
	_, err = h.client.RunShell(ctx, &sandboxv1.RunShellRequest{SessionId: "online", Command: "true"})
	wantCode(t, err, codes.Unavailable)
	_, err = h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: "online", Argv: []string{"true"}})
	wantCode(t, err, codes.Unavailable)
}
