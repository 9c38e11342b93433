package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
	"github.com/deskgrid/deskgrid/services/session/cluster"
)

// redisServer is a redis-server of the test's own, on a free port, that a
// test may freeze, flush and restart empty.
type redisServer struct {
	t    *testing.T
	port string
	cmd  *exec.Cmd
	// binds are the addresses it listens on (127.0.0.1 when empty).
	binds []string
}

func startRedisServer(t *testing.T, binds ...string) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed (scripts/setup --dev installs it): %v", err)
	}
	_, port, _ := net.SplitHostPort(freeAddr(t))
	r := &redisServer{t: t, port: port, binds: binds}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *redisServer) url() string { return "redis://127.0.0.1:" + r.port + "/0" }

// start runs it empty: no snapshot, no append-only file.
func (r *redisServer) start() {
	r.t.Helper()
	args := []string{"--port", r.port, "--bind", "127.0.0.1"}
	if len(r.binds) > 0 {
		// Clients on the test's other addresses too, without a password.
		args = append([]string{"--port", r.port, "--protected-mode", "no", "--bind"}, r.binds...)
	}
	r.cmd = exec.Command("redis-server", append(args, "--save", "", "--appendonly", "no", "--dir", r.t.TempDir())...)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + r.port})
	defer rdb.Close()
	deadline := time.Now().Add(20 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			r.t.Fatal("redis-server did not answer")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisServer) stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

func (r *redisServer) signal(sig syscall.Signal) {
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatal(err)
	}
}

// startNodeAt starts (or restarts) node id at addr, keeping its directories.
func (c *testCluster) startNodeAt(id, addr string, capacity int) *proc {
	c.t.Helper()
	dirs, ok := c.nodeDirs[id]
	if !ok {
		dirs = [2]string{c.t.TempDir(), c.t.TempDir()}
		c.nodeDirs[id] = dirs
	}
	args := append([]string{"serve", "node", "-grpc-addr", addr, "-node-addr", addr, "-node-id", id,
		"-node-max-sessions", strconv.Itoa(capacity), "-data-dir", dirs[0], "-runtime-dir", dirs[1], "-node-labels", "zone=" + id,
		"-first-display", strconv.Itoa(displayBase[id])},
		c.common...)
	p, ok := c.nodes[id]
	if ok && p.addr == addr {
		p.start()
	} else {
		p = startProc(c.t, "node "+id, addr, args...)
		c.nodes[id] = p
	}
	c.waitFor("node "+id+" alive", 30*time.Second, func() bool {
		n, err := c.reg.Node(context.Background(), id)
		return err == nil && n.Alive && n.Address == addr
	})
	return p
}

func (c *testCluster) createWith(req *sessionv1.CreateSessionRequest) (*sessionv1.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w, h := int32(320), int32(240)
	req.Display = &sessionv1.DisplaySpec{Width: &w, Height: &h}
	resp, err := c.clients[0].CreateSession(ctx, req)
	return resp.GetSession(), err
}

// TestClusterRecovery: what a cluster does when its parts fail and come
// back — nodes killed and restarted on the same address, Redis frozen,
// flushed and restarted empty — with two nodes and a session replica as
// separate processes, against a redis-server of the test's own.
func TestClusterRecovery(t *testing.T) {
	deskgridBinary(t)
	rs := startRedisServer(t)
	opt, _ := redis.ParseURL(rs.url())
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	const prefix = "deskgrid:"
	pg := postgresSchema(t)
	nats, _, _ := natstest.Start(t)
	c := &testCluster{t: t, reg: cluster.NewRegistry(rdb, prefix), nodes: map[string]*proc{}, nodeDirs: map[string][2]string{},
		common: []string{"-redis-url", rs.url(), "-redis-prefix", prefix}}
	addrs := map[string]string{"n1": freeAddr(t), "n2": freeAddr(t)}
	for _, id := range []string{"n1", "n2"} {
		c.startNodeAt(id, addrs[id], 8)
	}
	addr := freeAddr(t)
	replica := startProc(t, "session", addr, append([]string{"serve", "session", "-grpc-addr", addr, "-postgres-url", pg,
		"-nats-url", nats.URL(), "-tenant-max-sessions", "0"}, c.common...)...)
	c.replicas = append(c.replicas, replica)
	// The test's own calls wait for the replica (each has a deadline): it
	// is restarted below.
	conn, err := dial(addr, grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.clients = append(c.clients, sessionv1.NewSessionServiceClient(conn))
	gw, err := newSetup(context.Background(), "gateway", &serverConfig{RedisURL: rs.url(), RedisPrefix: prefix,
		NATSURL: nats.URL(), LogFormat: "text", LogLevel: "warn", ShutdownTimeout: 5 * time.Second}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.shutdown() })
	if c.router, err = gw.nodeRouter(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	on := func(id string) map[string]string { return map[string]string{"zone": id} }

	t.Run("node killed and restarted on its address", func(t *testing.T) {
		// The replica holds a connection to n1.
		if _, err := c.createWith(&sessionv1.CreateSessionRequest{NodeSelector: on("n1")}); err != nil {
			t.Fatal(err)
		}
		c.nodes["n1"].kill9()
		// Within the heartbeat window the create goes to the dead node,
		// the only one its selector allows: it fails, and says why.
		rid := "retry-" + randomHex(4)
		_, err := c.createWith(&sessionv1.CreateSessionRequest{NodeSelector: on("n1"), RequestId: rid})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("create on a dead node: %v, want Unavailable", err)
		}
		// Down long enough that a connection left to gRPC's default
		// back-off would wait several seconds before trying again.
		c.waitFor("n1 declared down", 30*time.Second, func() bool {
			n, err := c.reg.Node(context.Background(), "n1")
			return err == nil && !n.Alive
		})
		time.Sleep(8 * time.Second)
		restarted := time.Now()
		c.startNodeAt("n1", addrs["n1"], 8)
		ready := time.Now()
		// The first create after the node is ready succeeds; it is the
		// retry of the failed one, with the same request id, so it makes
		// a new session rather than answer with the failed one.
		s, err := c.createWith(&sessionv1.CreateSessionRequest{NodeSelector: on("n1"), RequestId: rid})
		if err != nil {
			t.Fatalf("create once the restarted node is ready: %v\n%s", err, c.logs())
		}
		if s.GetState() != sessionv1.SessionState_SESSION_STATE_RUNNING || s.GetNodeId() != "n1" {
			t.Fatalf("retried create: %s on %s", s.GetState(), s.GetNodeId())
		}
		t.Logf("node restart: ready %s after its start; the first create through the replica then took %s",
			ready.Sub(restarted).Round(time.Millisecond), time.Since(ready).Round(time.Millisecond))
		again, err := c.createWith(&sessionv1.CreateSessionRequest{NodeSelector: on("n1"), RequestId: rid})
		if err != nil || again.GetId() != s.GetId() {
			t.Fatalf("a further retry: %v, %v; want the running session %s", again.GetId(), err, s.GetId())
		}
	})

	t.Run("creates in the heartbeat window are re-placed", func(t *testing.T) {
		// n1 is the emptier node, so placement prefers it.
		for id, ss := range c.running() {
			if id == "n1" {
				for _, s := range ss {
					c.delete(s)
				}
			}
		}
		if _, err := c.createWith(&sessionv1.CreateSessionRequest{NodeSelector: on("n2")}); err != nil {
			t.Fatal(err)
		}
		c.nodes["n1"].kill9()
		for i := range 3 {
			s, err := c.createWith(&sessionv1.CreateSessionRequest{})
			if err != nil {
				t.Fatalf("create %d while n1 is dead but not declared so: %v\n%s", i, err, c.logs())
			}
			if s.GetNodeId() != "n2" || s.GetState() != sessionv1.SessionState_SESSION_STATE_RUNNING {
				t.Fatalf("create %d: %s on %s", i, s.GetState(), s.GetNodeId())
			}
		}
		if !strings.Contains(replica.logs.String(), "re-placed") {
			t.Fatalf("no create was placed on the dead node first; the test proves nothing\n%s", c.logs())
		}
		c.startNodeAt("n1", addrs["n1"], 8)
	})

	t.Run("Redis frozen", func(t *testing.T) {
		// Both nodes are up first: n1, just started again, connects to
		// Redis at its start and would give up on a frozen one.
		c.waitAlive(90*time.Second, "n1", "n2")
		rs.signal(syscall.SIGSTOP)
		frozen := time.Now()
		_, err := c.createWith(&sessionv1.CreateSessionRequest{})
		t.Logf("Redis frozen: the create answered %v after %s", status.Code(err), time.Since(frozen).Round(time.Millisecond))
		rs.signal(syscall.SIGCONT)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("create with Redis frozen: %v, want Unavailable", err)
		}
		c.waitAlive(90*time.Second, "n1", "n2")
	})

	t.Run("session replica restarted behind a gateway", func(t *testing.T) {
		httpAddr := freeAddr(t)
		startProc(t, "gateway", httpAddr, append([]string{"serve", "gateway", "-http-addr", httpAddr,
			"-session-addr", addr, "-agent-addr", addr, "-history-addr", addr, "-nats-url", nats.URL()}, c.common...)...)
		list := func() int {
			resp, err := http.Get("http://" + httpAddr + "/v1/sessions?page_size=1")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := list(); code != http.StatusOK {
			t.Fatalf("list through the gateway: %d", code)
		}
		replica.stop()
		// Down for a while, with calls failing meanwhile.
		for range 16 {
			if code := list(); code != http.StatusServiceUnavailable {
				t.Fatalf("list with the replica down: %d, want 503", code)
			}
			time.Sleep(500 * time.Millisecond)
		}
		replica.start()
		ready := time.Now()
		c.waitFor("the gateway to reach the restarted replica", 60*time.Second, func() bool { return list() == http.StatusOK })
		t.Logf("session replica restart: the gateway answered 200 %s after the replica was ready", time.Since(ready).Round(time.Millisecond))
	})

	t.Run("Redis loses its data", func(t *testing.T) {
		// The replica's restart above loads the machine; a node whose
		// heartbeat lapsed meanwhile is back within a TTL.
		c.waitAlive(30*time.Second, "n1", "n2")
		for range 2 {
			for _, id := range []string{"n1", "n2"} {
				if _, err := c.createWith(&sessionv1.CreateSessionRequest{NodeSelector: on(id)}); err != nil {
					t.Fatalf("create on %s: %v\n%s", id, err, c.logs())
				}
			}
		}
		before := c.running()
		if len(before["n1"]) == 0 || len(before["n2"]) == 0 {
			t.Fatalf("running before: %v", before)
		}
		// Every desktop keeps running and is reachable by its session.
		survives := func(what string) {
			t.Helper()
			lost := time.Now()
			defer func() {
				t.Logf("after %s: session map rebuilt, every desktop running and reachable, %s later", what, time.Since(lost).Round(time.Millisecond))
			}()
			c.waitFor("the session map rebuilt after "+what, 30*time.Second, func() bool {
				for _, ids := range before {
					for _, id := range ids {
						if _, err := c.reg.Lookup(context.Background(), id); err != nil {
							return false
						}
					}
				}
				return true
			})
			for node, ids := range before {
				for _, id := range ids {
					if st := c.get(id).GetState(); st != sessionv1.SessionState_SESSION_STATE_RUNNING {
						t.Fatalf("after %s, session %s on %s is %s", what, id, node, st)
					}
					var err error
					for range 50 { // the router's cache of the old map may lag a moment
						if err = c.screenshot(id); err == nil {
							break
						}
						time.Sleep(100 * time.Millisecond)
					}
					if err != nil {
						t.Fatalf("after %s, session %s on %s unreachable: %v\n%s", what, id, node, err, c.logs())
					}
					if _, err := os.Stat(filepath.Join(c.nodeDirs[node][1], "displays", id)); err != nil {
						t.Fatalf("after %s, the display of %s is gone from %s: %v", what, id, node, err)
					}
				}
			}
		}
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		survives("FLUSHALL")
		rs.stop()
		rs.start()
		survives("a restart of Redis without its data")

		// A node that is really gone while Redis forgot: the records put
		// its sessions back on it, and they are marked LOST.
		c.nodes["n2"].kill9()
		rs.stop()
		rs.start()
		c.waitFor("n2's sessions LOST", 60*time.Second, func() bool {
			for _, id := range before["n2"] {
				if c.get(id).GetState() != sessionv1.SessionState_SESSION_STATE_LOST {
					return false
				}
			}
			return true
		})
		for _, id := range before["n1"] {
			if st := c.get(id).GetState(); st != sessionv1.SessionState_SESSION_STATE_RUNNING {
				t.Fatalf("session %s on the live node is %s", id, st)
			}
			if err := c.screenshot(id); err != nil {
				t.Fatalf("session %s on the live node unreachable: %v", id, err)
			}
		}
		// n2 comes back and removes what its killed run left (mounts,
		// cgroups, X servers).
		c.startNodeAt("n2", addrs["n2"], 8)
		c.waitFor("n2's leftovers removed", 30*time.Second, func() bool {
			ents, _ := os.ReadDir(filepath.Join(c.nodeDirs["n2"][1], "displays"))
			return len(ents) == 0
		})
	})
}
