package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
	"github.com/deskgrid/deskgrid/services/session/cluster"
)

// netns is a network namespace of the test's own, joined to this one by a
// veth pair: hostIP on this side, nodeIP inside.
type netns struct {
	t              *testing.T
	name, path     string
	hostIf         string
	hostIP, nodeIP string
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newNetns makes the namespace and its link, removed at the end of the test.
func newNetns(t *testing.T) *netns {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := fmt.Sprintf("%x", b[:3])
	subnet := fmt.Sprintf("10.%d.%d.%d", 200+int(b[0])%50, b[1], int(b[3]&0x3f)*4) // a /30
	base := strings.Split(subnet, ".")
	last, _ := strconv.Atoi(base[3])
	n := &netns{t: t, name: "dgpart-" + id, path: "/run/netns/dgpart-" + id, hostIf: "dgp" + id + "h",
		hostIP: fmt.Sprintf("%s.%s.%s.%d", base[0], base[1], base[2], last+1),
		nodeIP: fmt.Sprintf("%s.%s.%s.%d", base[0], base[1], base[2], last+2)}
	ipCmd(t, "netns", "add", n.name)
	t.Cleanup(func() {
		// Removing the namespace removes the veth pair with it.
		_ = exec.Command("ip", "link", "del", n.hostIf).Run()
		if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", n.name, err, out)
		}
	})
	nsIf := "dgp" + id + "n"
	ipCmd(t, "link", "add", n.hostIf, "type", "veth", "peer", "name", nsIf, "netns", n.name)
	ipCmd(t, "addr", "add", n.hostIP+"/30", "dev", n.hostIf)
	ipCmd(t, "link", "set", n.hostIf, "up")
	ipCmd(t, "-n", n.name, "addr", "add", n.nodeIP+"/30", "dev", nsIf)
	ipCmd(t, "-n", n.name, "link", "set", nsIf, "up")
	ipCmd(t, "-n", n.name, "link", "set", "lo", "up")
	return n
}

// cut takes the link down: nothing passes between the namespace and the
// rest of the machine. heal brings it back.
func (n *netns) cut()  { ipCmd(n.t, "link", "set", n.hostIf, "down") }
func (n *netns) heal() { ipCmd(n.t, "link", "set", n.hostIf, "up") }

// wrap runs a command inside the namespace (its network only: the mounts,
// cgroups and /sys are the machine's).
func (n *netns) wrap() []string { return []string{"nsenter", "--net=" + n.path, "--"} }

// dial connects from inside the namespace, whatever the link's state.
func (n *netns) dial(ctx context.Context, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer unix.Close(orig)
	target, err := unix.Open(n.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	// The socket belongs to the namespace it is made in.
	conn, derr := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, and ends with this goroutine.
		if conn != nil {
			conn.Close()
		}
		return nil, err
	}
	runtime.UnlockOSThread()
	return conn, derr
}

// TestClusterPartition: a node in a network namespace of its own, on a veth
// pair, is cut off from Redis and the control plane, then healed. While
// cut off the control plane marks its sessions LOST and places creates on
// the other node, and the node keeps its desktops running; once healed the
// node rejoins, removes the desktops of the sessions given up, and the
// records, the session map and what each node runs agree: nothing lost,
// nothing running twice.
func TestClusterPartition(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s (iproute2, util-linux) is needed: %v", tool, err)
		}
	}
	deskgridBinary(t)
	ns := newNetns(t)
	rs := startRedisServer(t, "127.0.0.1", ns.hostIP)
	opt, _ := redis.ParseURL(rs.url())
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	const prefix = "deskgrid:"
	pg := postgresSchema(t)
	nats, _, _ := natstest.Start(t)
	reg := cluster.NewRegistry(rdb, prefix)
	c := &testCluster{t: t, reg: reg, nodes: map[string]*proc{}, nodeDirs: map[string][2]string{},
		common: []string{"-redis-url", rs.url(), "-redis-prefix", prefix}}
	ctx := context.Background()

	// n2 on loopback; n1 in the namespace, reaching Redis across the link.
	c.startNodeAt("n2", freeAddr(t), 8)
	_, port, _ := net.SplitHostPort(freeAddr(t))
	n1Addr := net.JoinHostPort(ns.nodeIP, port)
	c.nodeDirs["n1"] = [2]string{t.TempDir(), t.TempDir()}
	n1 := newProc(t, "node n1", n1Addr, ns.wrap(), []string{"serve", "node",
		"-grpc-addr", n1Addr, "-node-addr", n1Addr, "-node-id", "n1", "-node-max-sessions", "8",
		"-data-dir", c.nodeDirs["n1"][0], "-runtime-dir", c.nodeDirs["n1"][1], "-node-labels", "zone=n1",
		"-first-display", "250", "-insecure", "-redis-url", "redis://" + net.JoinHostPort(ns.hostIP, rs.port) + "/0", "-redis-prefix", prefix}...)
	n1.start()
	t.Cleanup(n1.stop)
	// Whatever happens below, the link is up again before the node stops.
	t.Cleanup(ns.heal)
	c.nodes["n1"] = n1
	c.waitFor("n1 alive", 30*time.Second, func() bool {
		n, err := reg.Node(ctx, "n1")
		return err == nil && n.Alive && n.Address == n1Addr
	})

	addr := freeAddr(t)
	c.replicas = append(c.replicas, startProc(t, "session", addr, append([]string{"serve", "session", "-grpc-addr", addr,
		"-postgres-url", pg, "-nats-url", nats.URL(), "-tenant-max-sessions", "0"}, c.common...)...))
	conn, err := dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.clients = append(c.clients, sessionv1.NewSessionServiceClient(conn))
	gw, err := newSetup(ctx, "gateway", &serverConfig{RedisURL: rs.url(), RedisPrefix: prefix,
		NATSURL: nats.URL(), LogFormat: "text", LogLevel: "warn", ShutdownTimeout: 5 * time.Second}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.shutdown() })
	if c.router, err = gw.nodeRouter(ctx, false); err != nil {
		t.Fatal(err)
	}
	// The test's own way to n1 from inside its namespace, which the cut
	// does not sever.
	inside, err := dial(n1Addr, grpc.WithContextDialer(ns.dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inside.Close() })
	n1Displays := displayv1.NewDisplayServiceClient(inside)
	n1Sandboxes := sandboxv1.NewSandboxServiceClient(inside)

	on := func(id string) map[string]string { return map[string]string{"zone": id} }
	var cutOff, kept []string // sessions on n1 and on n2 before the cut
	for i := range 3 {
		node := "n1"
		if i == 2 {
			node = "n2"
		}
		s, err := c.createWith(&sessionv1.CreateSessionRequest{NodeSelector: on(node)})
		if err != nil {
			t.Fatalf("create on %s: %v\n%s", node, err, c.logs())
		}
		if err := c.screenshot(s.GetId()); err != nil {
			t.Fatalf("screenshot of %s on %s: %v", s.GetId(), node, err)
		}
		if node == "n1" {
			cutOff = append(cutOff, s.GetId())
		} else {
			kept = append(kept, s.GetId())
		}
	}
	shotInside := func(id string) error {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := n1Displays.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: id, Format: displayv1.ImageFormat_IMAGE_FORMAT_PNG,
			Region: &displayv1.Rect{Width: 8, Height: 8}})
		return err
	}
	for _, id := range cutOff {
		if err := shotInside(id); err != nil {
			t.Fatalf("screenshot of %s from inside n1's namespace: %v", id, err)
		}
	}

	ns.cut()
	cut := time.Now()
	c.waitFor("n1's sessions LOST", 60*time.Second, func() bool {
		for _, id := range cutOff {
			if c.get(id).GetState() != sessionv1.SessionState_SESSION_STATE_LOST {
				return false
			}
		}
		return true
	})
	lostAfter := time.Since(cut)
	if n, err := reg.Node(ctx, "n1"); err != nil || n.Alive {
		t.Fatalf("n1 cut off: alive %v, %v", n.Alive, err)
	}
	if held, err := reg.Assigned(ctx, "n1"); err != nil || len(held) != 0 {
		t.Fatalf("the session map still gives n1 %v (%v)", held, err)
	}

	// Creates go to the node that can be reached; one only n1 may take
	// fails rather than land on it.
	var placed []string
	for range 2 {
		s, err := c.createWith(&sessionv1.CreateSessionRequest{})
		if err != nil {
			t.Fatalf("create while n1 is cut off: %v\n%s", err, c.logs())
		}
		if s.GetNodeId() != "n2" || s.GetState() != sessionv1.SessionState_SESSION_STATE_RUNNING {
			t.Fatalf("create while n1 is cut off: %s on %s", s.GetState(), s.GetNodeId())
		}
		placed = append(placed, s.GetId())
	}
	if s, err := c.createWith(&sessionv1.CreateSessionRequest{NodeSelector: on("n1")}); err == nil {
		t.Fatalf("a create for n1 while it is cut off answered %s on %s", s.GetState(), s.GetNodeId())
	}

	// The node itself keeps its desktops while it cannot tell whether the
	// control plane gave them up.
	if !n1.running() {
		t.Fatalf("n1 exited while cut off\n%s", n1.logs)
	}
	for _, id := range cutOff {
		if err := shotInside(id); err != nil {
			t.Fatalf("n1's desktop %s while cut off: %v\n%s", id, err, c.logs())
		}
	}
	if !strings.Contains(n1.logs.String(), "cluster heartbeat failing") {
		t.Fatalf("n1 did not notice it was cut off\n%s", c.logs())
	}

	ns.heal()
	healed := time.Now()
	c.waitFor("n1 alive again", 60*time.Second, func() bool {
		n, err := reg.Node(ctx, "n1")
		return err == nil && n.Alive
	})
	rejoined := time.Since(healed)
	// It takes down the desktops and sandboxes of the sessions given up.
	for deadline := time.Now().Add(60 * time.Second); ; {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ds, derr := n1Displays.ListDisplays(lctx, &displayv1.ListDisplaysRequest{})
		bs, berr := n1Sandboxes.ListSandboxes(lctx, &sandboxv1.ListSandboxesRequest{})
		cancel()
		ents, _ := os.ReadDir(filepath.Join(c.nodeDirs["n1"][1], "displays"))
		if derr == nil && berr == nil && len(ds.GetDisplays()) == 0 && len(bs.GetSandboxes()) == 0 && len(ents) == 0 {
			break
		}
		if time.Now().After(deadline) {
			var cluster []string
			for _, l := range strings.Split(n1.logs.String(), "\n") {
				if strings.Contains(l, "component=cluster") {
					cluster = append(cluster, l)
				}
			}
			t.Fatalf("n1 still holds the lost sessions' desktops after healing: displays %v (%v), sandboxes %v (%v), %d entries in its displays directory\nn1's cluster log:\n%s",
				ds.GetDisplays(), derr, bs.GetSandboxes(), berr, len(ents), strings.Join(cluster, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cleaned := time.Since(healed)

	// A create for n1 is served again.
	var back *sessionv1.Session
	c.waitFor("a create on n1 after healing", 90*time.Second, func() bool {
		s, err := c.createWith(&sessionv1.CreateSessionRequest{NodeSelector: on("n1")})
		if err != nil {
			t.Logf("create on n1 after healing: %v", err)
			return false
		}
		back = s
		return true
	})
	servedAfter := time.Since(healed)
	if back.GetNodeId() != "n1" || back.GetState() != sessionv1.SessionState_SESSION_STATE_RUNNING {
		t.Fatalf("create on n1 after healing: %s on %s", back.GetState(), back.GetNodeId())
	}
	if err := c.screenshot(back.GetId()); err != nil {
		t.Fatalf("screenshot of the new session on n1: %v", err)
	}

	// One truth: the LOST sessions stay LOST; every running session runs
	// on the node its record and the session map name, and each node runs
	// exactly the sessions the records give it.
	for _, id := range cutOff {
		if st := c.get(id).GetState(); st != sessionv1.SessionState_SESSION_STATE_LOST {
			t.Fatalf("session %s, given up while n1 was cut off, is %s after healing", id, st)
		}
	}
	running := c.running()
	want := map[string][]string{"n1": {back.GetId()}, "n2": append(slices.Clone(kept), placed...)}
	for node, ids := range want {
		got := slices.Clone(running[node])
		slices.Sort(got)
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Fatalf("running on %s: %v, want %v", node, got, ids)
		}
		for _, id := range ids {
			a, err := reg.Lookup(ctx, id)
			if err != nil || a.NodeID != node {
				t.Fatalf("session map for %s: %+v, %v; want %s", id, a, err, node)
			}
			if err := c.screenshot(id); err != nil {
				t.Fatalf("screenshot of %s on %s after healing: %v", id, node, err)
			}
		}
		n, err := reg.Node(ctx, node)
		if err != nil || n.Used.Sessions != int64(len(ids)) {
			t.Fatalf("%s reserves %d sessions (%v), runs %d", node, n.Used.Sessions, err, len(ids))
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ds, err := n1Displays.ListDisplays(lctx, &displayv1.ListDisplaysRequest{})
	if err != nil || len(ds.GetDisplays()) != 1 || ds.GetDisplays()[0].GetSessionId() != back.GetId() {
		t.Fatalf("n1's displays after healing: %v, %v; want only %s", ds.GetDisplays(), err, back.GetId())
	}
	// A lost session is deleted as any other.
	for _, id := range cutOff {
		c.delete(id)
	}
	t.Logf("partition: n1's sessions LOST %s after the cut; after healing n1 was alive in %s, had removed its lost desktops in %s, served a create in %s",
		lostAfter.Round(time.Millisecond), rejoined.Round(time.Millisecond), cleaned.Round(time.Millisecond), servedAfter.Round(time.Millisecond))
}
