package jail

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// run runs a shell script in a sandbox over a temporary home.
func run(t *testing.T, netw *Network, script string) (string, Exit) {
	t.Helper()
	var out strings.Builder
	exit, err := Run(context.Background(), Spec{HomeDir: t.TempDir(), Argv: []string{"bash", "-c", script}, Network: netw}, 30*time.Second, 0,
		func(_ Stream, p []byte) error { out.Write(p); return nil })
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return out.String(), exit
}

// listen opens a TCP listener on every host address and counts what it accepts.
func listen(t *testing.T) (port int, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted = &atomic.Int64{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, accepted
}

func hostAddr(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) == 0 {
		t.Fatal("this host has no non-loopback IPv4 address to test with")
	}
	return addrs[0]
}

// connect is a script that tries to connect and prints ok or failed.
func connect(addr string, port int) string {
	return fmt.Sprintf(`if timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%d' 2>/dev/null; then echo "%s ok"; else echo "%s failed"; fi; `, addr, port, addr, addr)
}

func TestNoNetworkHasOnlyLoopback(t *testing.T) {
	out, exit := run(t, nil, `tail -n +3 /proc/net/dev | cut -d: -f1; tail -n +2 /proc/net/route | wc -l`)
	if exit.Code != 0 || len(strings.Fields(out)) == 0 || strings.Fields(out)[0] != "lo" || len(strings.Fields(out)) != 2 || strings.Fields(out)[1] != "0" {
		t.Fatalf("interfaces and routes without network: %q %+v", out, exit)
	}
}

func TestNetworkHasTapAndDefaultRoute(t *testing.T) {
	out, exit := run(t, &Network{Hardened: true}, `ip -4 -o addr show tap0; cat /proc/net/route; ip -o link show tap0`)
	if exit.Code != 0 {
		t.Fatalf("exit %+v: %s", exit, out)
	}
	if !strings.Contains(out, "inet 10.0.2.100/24") {
		t.Errorf("tap0 lacks 10.0.2.100/24: %s", out)
	}
	// A default route: destination 00000000 via gateway 10.0.2.2 (0202000A).
	if !strings.Contains(out, "tap0\t00000000\t0202000A") {
		t.Errorf("no default route through 10.0.2.2: %s", out)
	}
	if !strings.Contains(out, "mtu 65520") {
		t.Errorf("mtu: %s", out)
	}
}

// Outbound connections work: with nothing denied, the host's own address is
// reached like any outside one (this machine has no outside network).
func TestNetworkReachesOutward(t *testing.T) {
	port, accepted := listen(t)
	host := hostAddr(t)
	out, _ := run(t, &Network{Hardened: true}, connect(host.String(), port))
	if !strings.Contains(out, host.String()+" ok") || accepted.Load() == 0 {
		t.Fatalf("no outbound connection: %q, accepted %d", out, accepted.Load())
	}
}

func TestNetworkCannotReachHost(t *testing.T) {
	port, accepted := listen(t)
	host := hostAddr(t)
	deny, err := HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	// 10.0.2.2 is where slirp4netns would forward to the host's loopback.
	out, exit := run(t, &Network{Hardened: true, Deny: deny},
		connect("127.0.0.1", port)+connect("10.0.2.2", port)+connect(host.String(), port))
	if exit.Code != 0 {
		t.Fatalf("exit %+v: %s", exit, out)
	}
	for _, a := range []string{"127.0.0.1", "10.0.2.2", host.String()} {
		if !strings.Contains(out, a+" failed") {
			t.Errorf("%s reached: %s", a, out)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("host listener accepted %d connections from the sandbox", n)
	}
}

func TestNetworkSlirpEndsWithCommand(t *testing.T) {
	run(t, &Network{}, "true")
	if n := slirpChildren(t); n != 0 {
		t.Fatalf("%d slirp4netns still running", n)
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
