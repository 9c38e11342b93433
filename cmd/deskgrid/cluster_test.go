package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
	"github.com/deskgrid/deskgrid/services/platform/noderoute"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore/sqlstoretest"
	"github.com/deskgrid/deskgrid/services/session/cluster"
)

// The cluster tests run nodes and session-service replicas as separate
// processes on loopback, against the real Redis, NATS and PostgreSQL.

func testRedisURL() string {
	if u := os.Getenv("DESKGRID_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// postgresSchema makes a schema of its own and returns a URL using it.
func postgresSchema(t *testing.T) string {
	t.Helper()
	_, dsn := sqlstoretest.Schema(t, "dgcluster")
	return dsn
}

// redisPrefix returns a key prefix of the test's own, removed at the end.
func redisPrefix(t *testing.T) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(testRedisURL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	prefix := "dgtest:" + randomHex(6) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var ks []string
		for iter.Next(ctx) {
			ks = append(ks, iter.Val())
		}
		if len(ks) > 0 {
			rdb.Del(ctx, ks...)
		}
		rdb.Close()
	})
	return rdb, prefix
}

// proc is one deskgrid server process, ready when its health service says
// every service serves, or for the gateway, when it answers HTTP.
type proc struct {
	*deskgridtest.Process
	t    *testing.T
	addr string
	logs logsOf
}

// newProc makes a process to start; wrap, if any, runs it through a
// command (deskgridtest.Process.Wrap).
func newProc(t *testing.T, name, addr string, wrap []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, addr: addr, Process: &deskgridtest.Process{Name: name, Args: args, Wrap: wrap}}
	p.logs = logsOf{p.Process}
	if args[1] == "gateway" {
		client := &http.Client{Timeout: 5 * time.Second}
		p.Ready = func() bool {
			resp, err := client.Get("http://" + addr + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
		return p
	}
	conn, err := dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p.Ready = func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}
	return p
}

func startProc(t *testing.T, name, addr string, args ...string) *proc {
	t.Helper()
	p := newProc(t, name, addr, nil, args...)
	p.start()
	t.Cleanup(p.stop)
	return p
}

// start runs the process (again) and waits until it is ready.
func (p *proc) start() { p.t.Helper(); p.Start(p.t) }

func (p *proc) running() bool { return p.Running() }

// stop interrupts the process as Ctrl-C would and waits for it.
func (p *proc) stop() { p.Stop() }

func (p *proc) kill9() { p.Kill() }

type testCluster struct {
	t        *testing.T
	reg      *cluster.Registry
	nodes    map[string]*proc
	nodeDirs map[string][2]string
	// nodeMetrics is each node's /metrics URL.
	nodeMetrics map[string]string
	replicas    []*proc
	clients     []sessionv1.SessionServiceClient
	router      *noderoute.Router
	common      []string
}

// displayBase gives each node of the test its own X display numbers: the
// nodes share this machine's /tmp/.X11-unix.
var displayBase = map[string]int{"n1": 200, "n2": 300, "n3": 400}

func (c *testCluster) startNode(id string, capacity int) *proc {
	c.t.Helper()
	dirs, ok := c.nodeDirs[id]
	if !ok {
		dirs = [2]string{c.t.TempDir(), c.t.TempDir()}
		c.nodeDirs[id] = dirs
	}
	addr, metricsAddr := freeAddr(c.t), freeAddr(c.t)
	if c.nodeMetrics == nil {
		c.nodeMetrics = map[string]string{}
	}
	c.nodeMetrics[id] = "http://" + metricsAddr + "/metrics"
	args := append([]string{"serve", "node", "-grpc-addr", addr, "-node-addr", addr, "-node-id", id,
		"-node-max-sessions", strconv.Itoa(capacity), "-data-dir", dirs[0], "-runtime-dir", dirs[1], "-node-labels", "zone=" + id,
		"-first-display", strconv.Itoa(displayBase[id]), "-metrics-addr", metricsAddr},
		c.common...)
	p := startProc(c.t, "node "+id, addr, args...)
	c.nodes[id] = p
	c.waitFor("node "+id+" alive", 30*time.Second, func() bool {
		n, err := c.reg.Node(context.Background(), id)
		return err == nil && n.Alive && n.Address == addr
	})
	return p
}

func (c *testCluster) waitFor(what string, within time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s\n%s", what, c.logs())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitAlive waits until every node of ids is alive in the registry.
func (c *testCluster) waitAlive(within time.Duration, ids ...string) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("nodes %v alive", ids), within, func() bool {
		for _, id := range ids {
			if n, err := c.reg.Node(context.Background(), id); err != nil || !n.Alive {
				return false
			}
		}
		return true
	})
}

// logs are the ends of every process's log, for a failure message.
func (c *testCluster) logs() string {
	var logs bytes.Buffer
	for id, n := range c.nodes {
		logs.WriteString("--- node " + id + " (errors)\n" + errorLines(n.logs.String()))
		logs.WriteString("--- node " + id + "\n" + tail(n.logs.String()))
	}
	for i, r := range c.replicas {
		logs.WriteString("--- session " + strconv.Itoa(i) + "\n" + tail(r.logs.String()))
	}
	return logs.String()
}

func errorLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
			out = append(out, l)
		}
	}
	return tail(strings.Join(out, "\n") + "\n")
}

func tail(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}

func (c *testCluster) get(id string) *sessionv1.Session {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A replica just restarted is waited for, as a client retrying would.
	resp, err := c.clients[0].GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: id}, grpc.WaitForReady(true))
	if err != nil {
		c.t.Fatalf("get %s: %v", id, err)
	}
	return resp.GetSession()
}

func (c *testCluster) running() map[string][]string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.clients[0].ListSessions(ctx, &sessionv1.ListSessionsRequest{States: []sessionv1.SessionState{sessionv1.SessionState_SESSION_STATE_RUNNING}, PageSize: 1000})
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range resp.GetSessions() {
		out[s.GetNodeId()] = append(out[s.GetNodeId()], s.GetId())
	}
	return out
}

func (c *testCluster) screenshot(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := displayv1.NewDisplayServiceClient(c.router).Screenshot(ctx, &displayv1.ScreenshotRequest{
		SessionId: id, Format: displayv1.ImageFormat_IMAGE_FORMAT_PNG, Region: &displayv1.Rect{Width: 8, Height: 8}})
	return err
}

func (c *testCluster) create(client sessionv1.SessionServiceClient) (*sessionv1.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w, h := int32(320), int32(240)
	resp, err := client.CreateSession(ctx, &sessionv1.CreateSessionRequest{Display: &sessionv1.DisplaySpec{Width: &w, Height: &h}})
	return resp.GetSession(), err
}

func (c *testCluster) delete(id string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.clients[0].DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id}); err != nil {
		c.t.Fatalf("delete %s: %v", id, err)
	}
}

// TestCluster: three nodes of 5 sessions, two session-service replicas.
func TestCluster(t *testing.T) {
	deskgridBinary(t)
	rdb, prefix := redisPrefix(t)
	pg := postgresSchema(t)
	nats, _, _ := natstest.Start(t)
	c := &testCluster{t: t, reg: cluster.NewRegistry(rdb, prefix), nodes: map[string]*proc{}, nodeDirs: map[string][2]string{},
		common: []string{"-redis-url", testRedisURL(), "-redis-prefix", prefix, "-log-level", "debug"}}
	const capacity = 5
	for _, id := range []string{"n1", "n2", "n3"} {
		c.startNode(id, capacity)
	}
	// Each node exports how long ago its last heartbeat succeeded, and its
	// sessions' limit events, labelled by itself.
	for _, id := range []string{"n1", "n2"} {
		m := scrapeURL(t, c.nodeMetrics[id])
		if ages := m.labelValues("deskgrid_node_heartbeat_age_seconds", "node"); len(ages) != 1 || ages[0] != id {
			t.Errorf("node %s exports heartbeat ages for %v", id, ages)
		}
		if nodes := m.labelValues("deskgrid_sandbox_oom_kills_total", "node"); len(nodes) != 1 || nodes[0] != id {
			t.Errorf("node %s exports OOM kills for %v", id, nodes)
		}
		// Its image store (empty here) and the room on its filesystem.
		if n, ok := m["deskgrid_image_store_images"]; !ok || m.value("deskgrid_image_store_images", labels{"node": id}) != 0 || len(n.GetMetric()) != 1 {
			t.Errorf("node %s exports image store images %v", id, n)
		}
		if free, size := m.value("deskgrid_image_store_filesystem_bytes", labels{"node": id, "kind": "free"}),
			m.value("deskgrid_image_store_filesystem_bytes", labels{"node": id, "kind": "size"}); free <= 0 || size < free {
			t.Errorf("node %s: image store filesystem free %v of %v bytes", id, free, size)
		}
		// Its Redis calls (heartbeats) are timed, and the connections it
		// opened counted.
		if m.value("deskgrid_redis_call_duration_seconds", labels{"outcome": "ok"}) < 1 || m.value("deskgrid_redis_dials_total", labels{"outcome": "ok"}) < 1 {
			t.Errorf("node %s: %v Redis calls, %v connections opened", id,
				m.value("deskgrid_redis_call_duration_seconds", nil), m.value("deskgrid_redis_dials_total", nil))
		}
	}
	replicaArgs := func(addr string) []string {
		return append([]string{"serve", "session", "-grpc-addr", addr, "-postgres-url", pg, "-nats-url", nats.URL()}, c.common...)
	}
	for i := range 2 {
		addr := freeAddr(t)
		p := startProc(t, "session "+strconv.Itoa(i), addr, replicaArgs(addr)...)
		c.replicas = append(c.replicas, p)
		conn, err := dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		c.clients = append(c.clients, sessionv1.NewSessionServiceClient(conn))
	}
	// Calls by session go through the node router the gateway and agent use.
	gw, err := newSetup(context.Background(), "gateway", &serverConfig{RedisURL: testRedisURL(), RedisPrefix: prefix,
		NATSURL: nats.URL(), LogFormat: "text", LogLevel: "warn", ShutdownTimeout: 5 * time.Second}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.shutdown() })
	if c.router, err = gw.nodeRouter(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if resp, err := healthpb.NewHealthClient(c.router).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("node router health: %v, %v", resp, err)
	}

	// 200 creates at once over both replicas: 15 fit, the rest are refused,
	// and no node holds more than its capacity.
	var (
		mu      sync.Mutex
		created []*sessionv1.Session
		refused int
		other   []error
		wg      sync.WaitGroup
	)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := c.create(c.clients[i%2])
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created = append(created, s)
			case status.Code(err) == codes.ResourceExhausted:
				refused++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("%d creates failed otherwise, first: %v\n%s", len(other), other[0], c.logs())
	}
	if len(created) != 3*capacity || refused != 200-3*capacity {
		t.Fatalf("created %d, refused %d; want %d and %d", len(created), refused, 3*capacity, 200-3*capacity)
	}
	perNode := c.running()
	for _, id := range []string{"n1", "n2", "n3"} {
		if len(perNode[id]) != capacity {
			t.Fatalf("node %s runs %d sessions, want %d: %v", id, len(perNode[id]), capacity, perNode)
		}
	}
	for _, s := range created {
		if err := c.screenshot(s.GetId()); err != nil {
			t.Fatalf("screenshot of %s through the node router: %v", s.GetId(), err)
		}
	}

	t.Run("gateway routes by session", func(t *testing.T) {
		httpAddr := freeAddr(t)
		startProc(t, "gateway", httpAddr, append([]string{"serve", "gateway", "-http-addr", httpAddr,
			"-session-addr", c.replicas[0].addr, "-agent-addr", c.replicas[0].addr, "-history-addr", c.replicas[0].addr,
			"-nats-url", nats.URL()}, c.common...)...)
		get := func(path string) (int, string) {
			resp, err := http.Get("http://" + httpAddr + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		seen := map[string]bool{}
		for _, s := range created {
			if code, body := get("/v1/sessions/" + s.GetId() + "/screenshot?region.width=4&region.height=4"); code != http.StatusOK {
				t.Fatalf("screenshot of %s on %s through the gateway: %d %.300s", s.GetId(), s.GetNodeId(), code, body)
			}
			seen[s.GetNodeId()] = true
		}
		if len(seen) != 3 {
			t.Fatalf("sessions on %v, want all three nodes", seen)
		}
		if code, body := get("/v1/nodes"); code != http.StatusOK || strings.Count(body, "NODE_STATE_READY") != 3 {
			t.Fatalf("GET /v1/nodes: %d %s", code, body)
		}
	})

	t.Run("restart a session replica during activity", func(t *testing.T) {
		stopShots := make(chan struct{})
		shotErrs := make(chan error, 1)
		go func() {
			defer close(shotErrs)
			for {
				select {
				case <-stopShots:
					return
				default:
				}
				for _, s := range created[:3] {
					if err := c.screenshot(s.GetId()); err != nil {
						shotErrs <- err
						return
					}
				}
			}
		}()
		r := c.replicas[0]
		r.stop()
		// The other replica serves meanwhile.
		if _, err := c.clients[1].GetSession(context.Background(), &sessionv1.GetSessionRequest{SessionId: created[0].GetId()}); err != nil {
			t.Fatalf("other replica while one restarts: %v", err)
		}
		r.start()
		close(stopShots)
		if err := <-shotErrs; err != nil {
			t.Fatalf("desktop unreachable while a session replica restarted: %v", err)
		}
		for _, s := range created {
			if got := c.get(s.GetId()); got.GetState() != sessionv1.SessionState_SESSION_STATE_RUNNING {
				t.Fatalf("session %s is %s after the replica restart", s.GetId(), got.GetState())
			}
		}
	})

	t.Run("drain", func(t *testing.T) {
		for _, id := range append(perNode["n1"], perNode["n2"]...) {
			c.delete(id)
		}
		var out bytes.Buffer
		if err := runNodes(context.Background(), []string{"drain", "n1", "-addr", c.replicas[1].addr}, &out, &out); err != nil {
			t.Fatalf("nodes drain: %v\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "draining") {
			t.Fatalf("nodes drain printed %q", out.String())
		}
		for range capacity {
			s, err := c.create(c.clients[0])
			if err != nil {
				t.Fatal(err)
			}
			if s.GetNodeId() != "n2" {
				t.Fatalf("placed on %s while n1 drains and n3 is full", s.GetNodeId())
			}
		}
		if _, err := c.create(c.clients[1]); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("create with only a draining node free: %v, want ResourceExhausted", err)
		}
		out.Reset()
		if err := runNodes(context.Background(), []string{"undrain", "n1", "-addr", c.replicas[0].addr}, &out, &out); err != nil {
			t.Fatalf("nodes undrain: %v", err)
		}
		out.Reset()
		if err := runNodes(context.Background(), []string{"list", "-addr", c.replicas[0].addr}, &out, &out); err != nil {
			t.Fatal(err)
		}
		if strings.Count(out.String(), "ready") != 3 {
			t.Fatalf("nodes list:\n%s", out.String())
		}
	})

	t.Run("kill -9 a node", func(t *testing.T) {
		victims := c.running()["n3"]
		if len(victims) != capacity {
			t.Fatalf("n3 runs %v", victims)
		}
		killed := time.Now()
		c.nodes["n3"].kill9()
		c.waitFor("n3's sessions LOST", 30*time.Second, func() bool {
			for _, id := range victims {
				if c.get(id).GetState() != sessionv1.SessionState_SESSION_STATE_LOST {
					return false
				}
			}
			return true
		})
		t.Logf("node killed -> all %d sessions LOST in %s (bound: 5 s)", len(victims), time.Since(killed).Round(time.Millisecond))
		// Calls to a lost session fail at once rather than hang.
		if err := c.screenshot(victims[0]); status.Code(err) != codes.NotFound && status.Code(err) != codes.Unavailable {
			t.Fatalf("screenshot of a lost session: %v", err)
		}
		// New sessions go to the live nodes.
		s, err := c.create(c.clients[1])
		if err != nil {
			t.Fatal(err)
		}
		if s.GetNodeId() == "n3" {
			t.Fatal("placed on the dead node")
		}
		if err := c.screenshot(s.GetId()); err != nil {
			t.Fatal(err)
		}

		// The node comes back: it keeps nothing of its previous life.
		c.startNode("n3", capacity)
		displays := filepath.Join(c.nodeDirs["n3"][1], "displays")
		c.waitFor("n3's leftovers removed", 30*time.Second, func() bool {
			ents, _ := os.ReadDir(displays)
			for _, e := range ents {
				for _, v := range victims {
					if e.Name() == v {
						return false
					}
				}
			}
			return true
		})
		s2, err := c.create(c.clients[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := c.screenshot(s2.GetId()); err != nil {
			t.Fatal(err)
		}
		for _, id := range victims {
			c.delete(id) // LOST -> STOPPED, nothing left to do on the node
		}
	})

	t.Run("kill -9 a node and restart it at once", func(t *testing.T) {
		victims := c.running()["n2"]
		if len(victims) == 0 {
			t.Fatalf("n2 runs nothing: %v", c.running())
		}
		c.nodes["n2"].kill9()
		// Back before its heartbeat expired: the sessions of its previous
		// run are given up (LOST), not kept as if they still ran.
		c.startNode("n2", capacity)
		for _, id := range victims {
			if st := c.get(id).GetState(); st != sessionv1.SessionState_SESSION_STATE_LOST {
				t.Fatalf("session %s of the killed run is %s, want LOST", id, st)
			}
		}
		ents, _ := os.ReadDir(filepath.Join(c.nodeDirs["n2"][1], "displays"))
		for _, e := range ents {
			for _, v := range victims {
				if e.Name() == v {
					t.Fatalf("display of lost session %s still on the restarted node", v)
				}
			}
		}
		for range 2 {
			s, err := c.create(c.clients[1])
			if err != nil {
				t.Fatal(err)
			}
			if err := c.screenshot(s.GetId()); err != nil {
				t.Fatal(err)
			}
		}
	})
}
