package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deskgrid/deskgrid/services/platform/noderoute"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
	"github.com/deskgrid/deskgrid/services/session/placement"
)

func redisURL() string {
	if u := os.Getenv("DESKGRID_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// newRegistry returns a registry under a prefix of its own, removed after the test.
func newRegistry(t testing.TB) (*Registry, *redis.Client) {
	t.Helper()
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "dgtest:" + hex.EncodeToString(b[:]) + ":"
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
	return NewRegistry(rdb, prefix), rdb
}

func addNode(t testing.TB, reg *Registry, id string, capSessions int64, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	if err := reg.Register(ctx, NodeInfo{ID: id, Address: "127.0.0.1:1" + id,
		Capacity: placement.Capacity{Sessions: capSessions, CPUMillis: 64000, MemoryBytes: 64 << 30}, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Heartbeat(ctx, id, "boot", time.Minute); err != nil {
		t.Fatal(err)
	}
}

// Two placers (as two session-service replicas) placing 200 sessions at once
// on three nodes of 20 never overfill one; the rest are refused.
func TestConcurrentPlacementNeverOverfills(t *testing.T) {
	reg, _ := newRegistry(t)
	for _, id := range []string{"n1", "n2", "n3"} {
		addNode(t, reg, id, 20, nil)
	}
	placers := []*Placer{NewPlacer(reg, PlacerConfig{Seed: 1}), NewPlacer(reg, PlacerConfig{Seed: 2})}
	ctx := context.Background()
	var ok, full atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := placers[i%2].Place(ctx, placement.Request{SessionID: fmt.Sprintf("s%03d", i), Tenant: "t"})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, placement.ErrNoCapacity):
				full.Add(1)
			default:
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ok.Load() != 60 || full.Load() != 140 {
		t.Fatalf("placed %d, refused %d; want 60 and 140", ok.Load(), full.Load())
	}
	snap, err := reg.Snapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range snap {
		held, _ := reg.Assigned(ctx, n.ID)
		if n.Used.Sessions != 20 || len(held) != 20 {
			t.Fatalf("node %s: used %d, holds %d; want 20", n.ID, n.Used.Sessions, len(held))
		}
	}
}

func TestPlaceReleaseAndMap(t *testing.T) {
	reg, _ := newRegistry(t)
	ctx := context.Background()
	// The session map is built, as a session replica does at its start.
	if _, err := reg.Restore(ctx, nil); err != nil {
		t.Fatal(err)
	}
	addNode(t, reg, "a", 1, map[string]string{"region": "eu"})
	addNode(t, reg, "b", 1, map[string]string{"region": "us"})
	p := NewPlacer(reg, PlacerConfig{Seed: 7})

	n, err := p.Place(ctx, placement.Request{SessionID: "s1", NodeSelector: map[string]string{"region": "us"}})
	if err != nil || n.ID != "b" || n.Address != "127.0.0.1:1b" {
		t.Fatalf("Place = %+v, %v; want node b", n, err)
	}
	// Placing again is the same placement, not a second one.
	if again, err := p.Place(ctx, placement.Request{SessionID: "s1"}); err != nil || again.ID != "b" {
		t.Fatalf("Place again = %+v, %v", again, err)
	}
	if _, err := p.Place(ctx, placement.Request{SessionID: "s2", NodeSelector: map[string]string{"region": "us"}}); !errors.Is(err, placement.ErrNoCapacity) {
		t.Fatalf("second on a full node: %v, want ErrNoCapacity", err)
	}
	if _, err := p.Place(ctx, placement.Request{SessionID: "s2", NodeSelector: map[string]string{"gpu": "true"}}); !errors.Is(err, placement.ErrNoMatchingNode) {
		t.Fatalf("selector nothing matches: %v, want ErrNoMatchingNode", err)
	}
	a, err := reg.Lookup(ctx, "s1")
	if err != nil || a.NodeID != "b" || a.Generation <= 0 {
		t.Fatalf("Lookup = %+v, %v", a, err)
	}
	if addr, err := reg.Resolve(ctx, "s1"); err != nil || addr != "127.0.0.1:1b" {
		t.Fatalf("Resolve = %q, %v", addr, err)
	}
	if _, err := reg.Resolve(ctx, "nope"); !errors.Is(err, ErrSessionNotPlaced) {
		t.Fatalf("Resolve unknown: %v", err)
	}
	// A release naming another node frees nothing.
	if err := p.Release(ctx, "a", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Lookup(ctx, "s1"); err != nil {
		t.Fatalf("release on the wrong node freed the session: %v", err)
	}
	if err := p.Release(ctx, "b", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx, "b", "s1"); err != nil {
		t.Fatalf("second release: %v", err)
	}
	snap, _ := reg.Snapshot(ctx, "")
	for _, n := range snap {
		if n.Used != (placement.Capacity{}) {
			t.Fatalf("node %s still uses %+v after release", n.ID, n.Used)
		}
	}
	// A newer placement gets a higher generation.
	if _, err := p.Place(ctx, placement.Request{SessionID: "s1", NodeSelector: map[string]string{"region": "us"}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := reg.Lookup(ctx, "s1"); b.Generation <= a.Generation {
		t.Fatalf("generation %d after %d", b.Generation, a.Generation)
	}
}

func TestReserveChecksResources(t *testing.T) {
	reg, _ := newRegistry(t)
	ctx := context.Background()
	if err := reg.Register(ctx, NodeInfo{ID: "n", Address: "x:1", Capacity: placement.Capacity{Sessions: 10, CPUMillis: 1000, MemoryBytes: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Reserve(ctx, "n", placement.Request{SessionID: "s0"}); !errors.As(err, new(*RefusedError)) {
		t.Fatalf("reserve before the first heartbeat: %v, want refused", err)
	}
	if _, err := reg.Heartbeat(ctx, "n", "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		sid     string
		cpu     int64
		mem     int64
		wantErr error
	}{
		{"s1", 600, 1 << 29, nil},
		{"s2", 600, 0, placement.ErrNoCapacity},
		{"s3", 400, 1 << 29, nil},
		{"s4", 0, 1, placement.ErrNoCapacity},
		{"s5", 0, 0, nil},
	}
	for _, tt := range tests {
		_, err := reg.Reserve(ctx, "n", placement.Request{SessionID: tt.sid, Resources: placement.Resources{CPUMillis: tt.cpu, MemoryBytes: tt.mem}})
		if !errors.Is(err, tt.wantErr) {
			t.Fatalf("reserve %s: %v, want %v", tt.sid, err, tt.wantErr)
		}
	}
	if err := reg.SetDraining(ctx, "n", true); err != nil {
		t.Fatal(err)
	}
	var refused *RefusedError
	if _, err := reg.Reserve(ctx, "n", placement.Request{SessionID: "s6"}); !errors.As(err, &refused) || refused.Reason != "draining" {
		t.Fatalf("reserve on a draining node: %v", err)
	}
	if err := reg.SetDraining(ctx, "missing", true); !errors.Is(err, ErrNodeNotFound) {
		t.Fatalf("drain unknown node: %v", err)
	}
}

func TestDrainSkipsNode(t *testing.T) {
	reg, _ := newRegistry(t)
	ctx := context.Background()
	addNode(t, reg, "a", 100, nil)
	addNode(t, reg, "b", 100, nil)
	if err := reg.SetDraining(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	p := NewPlacer(reg, PlacerConfig{Seed: 3, SnapshotMaxAge: -1})
	for i := range 20 {
		n, err := p.Place(ctx, placement.Request{SessionID: fmt.Sprint("s", i)})
		if err != nil || n.ID != "b" {
			t.Fatalf("Place = %+v, %v; want b while a drains", n, err)
		}
	}
	if err := reg.SetDraining(ctx, "a", false); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Place(ctx, placement.Request{SessionID: "after"}); err != nil || n.ID != "a" {
		t.Fatalf("after undrain Place = %+v, %v; want the emptier a", n, err)
	}
}

// A member heartbeats; when it stops, the watcher reports its node and its
// sessions are released; when it comes back it reconciles against the map.
func TestMemberWatcherAndRejoin(t *testing.T) {
	reg, _ := newRegistry(t)
	ctx := context.Background()
	var mu sync.Mutex
	var kept []map[string]bool
	reconcile := func(_ context.Context, keep map[string]bool) error {
		mu.Lock()
		defer mu.Unlock()
		kept = append(kept, keep)
		return nil
	}
	cfg := MemberConfig{Node: NodeInfo{ID: "n1", Address: "127.0.0.1:9", Capacity: placement.Capacity{Sessions: 5}},
		Interval: 50 * time.Millisecond, TTL: 300 * time.Millisecond}
	m, err := Join(ctx, reg, cfg, nil, reconcile)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPlacer(reg, PlacerConfig{Seed: 1})
	if _, err := p.Place(ctx, placement.Request{SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	lostCh := make(chan string, 10)
	w := Watch(reg, 50*time.Millisecond, nil, func(_ context.Context, id string) error {
		select {
		case lostCh <- id:
		default:
		}
		return nil
	})
	t.Cleanup(func() { _ = w.Close(context.Background()) })

	// Alive for several TTLs: never reported.
	testkit.Eventually(t, 10*time.Second, func() bool {
		n, _ := reg.Node(ctx, "n1")
		return n.Alive
	}, "several heartbeats")
	if err := m.Close(ctx, false); err != nil { // as a kill: no leave
		t.Fatal(err)
	}
	select {
	case id := <-lostCh:
		if id != "n1" {
			t.Fatalf("lost %q", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dead node not reported")
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		held, _ := reg.Assigned(ctx, "n1")
		return len(held) == 0
	}, "the dead node's sessions released")
	if _, err := p.Place(ctx, placement.Request{SessionID: "s2"}); !errors.Is(err, placement.ErrNoMatchingNode) {
		t.Fatalf("placing on a dead node: %v", err)
	}

	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Back again: it reconciles with nothing to keep.
	m2, err := Join(ctx, reg, cfg, nil, reconcile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m2.Close(context.Background(), true) })
	mu.Lock()
	if len(kept) != 2 || len(kept[0]) != 0 || len(kept[1]) != 0 {
		t.Fatalf("reconciles: %v", kept)
	}
	mu.Unlock()
	if _, err := p.Place(ctx, placement.Request{SessionID: "s3"}); err != nil {
		t.Fatal(err)
	}
	// Restarted before its heartbeat expired (kill -9 and back at once):
	// the sessions of its previous run are given up and lost, then it
	// starts afresh with nothing to keep.
	m2.Close(ctx, false)
	w2 := Watch(reg, 50*time.Millisecond, nil, func(context.Context, string) error { return nil })
	t.Cleanup(func() { _ = w2.Close(context.Background()) })
	m3, err := Join(ctx, reg, cfg, nil, reconcile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m3.Close(context.Background(), true) })
	mu.Lock()
	last := kept[len(kept)-1]
	mu.Unlock()
	if len(last) != 0 {
		t.Fatalf("restart kept %v, want nothing of the previous run", last)
	}
	if _, err := reg.Lookup(ctx, "s3"); !errors.Is(err, ErrSessionNotPlaced) {
		t.Fatalf("session of the previous run still placed: %v", err)
	}
}

// A node whose heartbeat lapsed while its process kept running learns so at
// its next heartbeat and reconciles.
func TestMemberReconcilesAfterLapse(t *testing.T) {
	reg, rdb := newRegistry(t)
	ctx := context.Background()
	if _, err := reg.Restore(ctx, nil); err != nil { // a session replica built the map
		t.Fatal(err)
	}
	calls := make(chan map[string]bool, 10)
	cfg := MemberConfig{Node: NodeInfo{ID: "n1", Address: "127.0.0.1:9", Capacity: placement.Capacity{Sessions: 5}},
		Interval: 50 * time.Millisecond, TTL: 2 * time.Second}
	m, err := Join(ctx, reg, cfg, nil, func(_ context.Context, keep map[string]bool) error {
		calls <- keep
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background(), true) })
	<-calls
	rdb.Del(ctx, reg.k.alive("n1")) // as if it had expired during a partition
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconcile after the heartbeat lapsed")
	}
}

func TestSnapshotTenantCounts(t *testing.T) {
	reg, _ := newRegistry(t)
	ctx := context.Background()
	addNode(t, reg, "a", 10, nil)
	addNode(t, reg, "b", 10, nil)
	p := NewPlacer(reg, PlacerConfig{Seed: 5, TenantAntiAffinity: true, K: -1})
	// With anti-affinity, one tenant's sessions alternate between the nodes
	// even though another tenant loads them.
	for i := range 6 {
		if _, err := p.Place(ctx, placement.Request{SessionID: fmt.Sprint("x", i), Tenant: "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	snap, _ := reg.Snapshot(ctx, "acme")
	got := []int64{snap[0].TenantSessions, snap[1].TenantSessions}
	if !slices.Equal(got, []int64{3, 3}) {
		t.Fatalf("tenant spread %v", got)
	}
}

// BenchmarkPlaceRedis100 is a placement over 100 registered nodes including
// the Redis round trips (snapshot and reservation); p99-ns per placement.
// cached reuses a replica's snapshot for up to 100 ms, as deployed; fresh
// reads the whole registry for every placement.
func BenchmarkPlaceRedis100(b *testing.B) {
	for _, bc := range []struct {
		name string
		age  time.Duration
	}{{"cached", 0}, {"fresh", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			reg, _ := newRegistry(b)
			ctx := context.Background()
			for i := range 100 {
				addNode(b, reg, fmt.Sprintf("n%03d", i), 1<<30, map[string]string{"region": []string{"eu", "us"}[i%2]})
			}
			p := NewPlacer(reg, PlacerConfig{Seed: 1, SnapshotMaxAge: bc.age})
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				if _, err := p.Place(ctx, placement.Request{SessionID: fmt.Sprint("s", i), NodeSelector: map[string]string{"region": "eu"}}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// With Redis unreachable, placement fails clearly, and works again once a
// reachable Redis is used.
func TestPlaceRedisUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	p := NewPlacer(NewRegistry(rdb, "dgtest:down:"), PlacerConfig{})
	_, err = p.Place(context.Background(), placement.Request{SessionID: "s"})
	if !errors.Is(err, placement.ErrUnavailable) {
		t.Fatalf("Place with Redis down: %v, want ErrUnavailable", err)
	}
}

// A reservation whose release was missed is freed by the sweep once its
// session has ended.
func TestSweepEnded(t *testing.T) {
	reg, _ := newRegistry(t)
	ctx := context.Background()
	addNode(t, reg, "a", 10, nil)
	p := NewPlacer(reg, PlacerConfig{Seed: 1})
	for _, id := range []string{"ended", "running"} {
		if _, err := p.Place(ctx, placement.Request{SessionID: id}); err != nil {
			t.Fatal(err)
		}
	}
	w := WatchWith(reg, WatchConfig{Interval: 20 * time.Millisecond, SweepEvery: 20 * time.Millisecond,
		Ended: func(_ context.Context, id string) (bool, error) { return id == "ended", nil }})
	t.Cleanup(func() { _ = w.Close(ctx) })
	testkit.Eventually(t, 10*time.Second, func() bool {
		held, _ := reg.Assigned(ctx, "a")
		return !held["ended"] && held["running"]
	}, "the ended session released")
	n, _ := reg.Node(ctx, "a")
	if n.Used.Sessions != 1 {
		t.Fatalf("used %d after the sweep, want 1", n.Used.Sessions)
	}
}

// Redis losing its data (restarted empty, flushed) is no verdict on the
// nodes: a node keeps every desktop until a session replica has rebuilt the
// map from the session records, then keeps what the records say runs on
// it. A node that is really gone has its sessions reported lost.
func TestMemberKeepsSessionsWhenRedisForgets(t *testing.T) {
	reg, rdb := newRegistry(t)
	ctx := context.Background()
	if _, err := reg.Restore(ctx, nil); err != nil {
		t.Fatal(err)
	}
	calls := make(chan map[string]bool, 100)
	cfg := MemberConfig{Node: NodeInfo{ID: "n1", Address: "127.0.0.1:9", Capacity: placement.Capacity{Sessions: 5}},
		Interval: 50 * time.Millisecond, TTL: 500 * time.Millisecond}
	m, err := Join(ctx, reg, cfg, nil, func(_ context.Context, keep map[string]bool) error {
		calls <- keep
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background(), true) })
	<-calls
	if _, err := NewPlacer(reg, PlacerConfig{Seed: 1}).Place(ctx, placement.Request{SessionID: "s1", Tenant: "t"}); err != nil {
		t.Fatal(err)
	}

	// Redis forgets everything of this deployment.
	forget(t, rdb, reg)
	testkit.Eventually(t, 10*time.Second, func() bool {
		n, err := reg.Node(ctx, "n1")
		return err == nil && n.Alive
	}, "the node to heartbeat into the empty Redis")
	// Several heartbeats later it has still not been told to drop s1.
	time.Sleep(5 * cfg.Interval)
	select {
	case keep := <-calls:
		t.Fatalf("node reconciled against an empty Redis, keeping %v", keep)
	default:
	}

	// A session replica rebuilds the map from the records, which also
	// place s2 on n2, a node that never comes back.
	records := []Assignment{{SessionID: "s1", NodeID: "n1", Tenant: "t"}, {SessionID: "s2", NodeID: "n2", Tenant: "t"}}
	lost := make(chan string, 10)
	w := WatchWith(reg, WatchConfig{Interval: 50 * time.Millisecond,
		Records: func(context.Context) ([]Assignment, error) { return records, nil },
		Lost: func(_ context.Context, id string) error {
			select {
			case lost <- id:
			default:
			}
			return nil
		}})
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	select {
	case keep := <-calls:
		if len(keep) != 1 || !keep["s1"] {
			t.Fatalf("reconciled against the rebuilt map keeping %v, want s1", keep)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("node did not reconcile against the rebuilt map")
	}
	select {
	case id := <-lost:
		if id != "n2" {
			t.Fatalf("reported %s lost, want n2", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sessions of a node that is gone were not reported lost")
	}
	if a, err := reg.Lookup(ctx, "s1"); err != nil || a.NodeID != "n1" {
		t.Fatalf("s1 in the rebuilt map: %+v, %v", a, err)
	}
	if n, _ := reg.Node(ctx, "n1"); n.Used.Sessions != 1 {
		t.Fatalf("n1 uses %d after the rebuild, want 1", n.Used.Sessions)
	}
}

// Redis restarted empty and another session replica rebuilt the map
// before this replica's watcher looked: it never saw Redis without a map,
// only a new one whose nodes have not heartbeated into it yet. It waits
// the grace all the same before judging any heartbeat.
func TestWatcherWaitsOutTheGraceAfterAnotherReplicaRebuilt(t *testing.T) {
	reg, rdb := newRegistry(t)
	ctx := context.Background()
	addNode(t, reg, "n1", 5, nil)
	// n0 never heartbeats: its sessions are reported each time the grace
	// is over, which shows when the watcher judges.
	if err := reg.Register(ctx, NodeInfo{ID: "n0", Address: "127.0.0.1:10", Capacity: placement.Capacity{Sessions: 5}}); err != nil {
		t.Fatal(err)
	}
	records := []Assignment{{SessionID: "s0", NodeID: "n0", Tenant: "t"}, {SessionID: "s1", NodeID: "n1", Tenant: "t"}}
	lost := make(chan string, 100)
	const interval = 20 * time.Millisecond
	w := WatchWith(reg, WatchConfig{Interval: interval, Grace: 50 * interval,
		Records: func(context.Context) ([]Assignment, error) { return records, nil },
		Lost: func(_ context.Context, id string) error {
			lost <- id
			return nil
		}})
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	if id := <-lost; id != "n0" {
		t.Fatalf("reported %s lost, want n0", id)
	}
	// The watcher releases n0's sessions from the map after reporting them:
	// done before the rebuild below, or it would take s0 out of the new map.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(interval) {
		if _, err := reg.Lookup(ctx, "s0"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watcher never released the sessions of the node it reported lost")
		}
	}

	// In one transaction, as the watcher sees it: every key gone, and the
	// map rebuilt by another replica from the same records.
	iter := rdb.Scan(ctx, 0, reg.Prefix()+"*", 1000).Iterator()
	var ks []string
	for iter.Next(ctx) {
		ks = append(ks, iter.Val())
	}
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, ks...)
		for _, a := range records {
			restoreScript.Eval(ctx, p, nil, reg.Prefix(), a.NodeID, a.SessionID, 0, 0, a.Tenant)
		}
		p.Set(ctx, reg.k.epoch(), "rebuilt-elsewhere", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// n1 heartbeats again well within the grace.
	time.Sleep(10 * interval)
	addNode(t, reg, "n1", 5, nil)
	select {
	case id := <-lost:
		if id != "n0" {
			t.Fatalf("reported %s lost before the grace was over, want only n0", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sessions of a node that is gone were not reported lost after the rebuild")
	}
	if a, err := reg.Lookup(ctx, "s1"); err != nil || a.NodeID != "n1" {
		t.Fatalf("s1 in the rebuilt map: %+v, %v", a, err)
	}
}

// Redis lost its data: until the session map is rebuilt and the session's
// node registers again, a call routed by the session is told to try again
// (UNAVAILABLE at the router), not that the session runs nowhere (NOT_FOUND).
func TestResolveWhileTheMapIsRebuilt(t *testing.T) {
	reg, rdb := newRegistry(t)
	ctx := context.Background()
	if _, err := reg.Restore(ctx, nil); err != nil {
		t.Fatal(err)
	}
	addNode(t, reg, "n1", 5, nil)
	if _, err := NewPlacer(reg, PlacerConfig{Seed: 1}).Place(ctx, placement.Request{SessionID: "s1", Tenant: "t"}); err != nil {
		t.Fatal(err)
	}
	resolve := reg.RouteResolver().Resolve
	if addr, err := resolve(ctx, "s1"); err != nil || addr != "127.0.0.1:1n1" {
		t.Fatalf("resolve s1: %q, %v", addr, err)
	}
	if _, err := resolve(ctx, "s2"); !errors.Is(err, noderoute.ErrNotPlaced) {
		t.Fatalf("resolve a session never placed: %v, want ErrNotPlaced", err)
	}

	forget(t, rdb, reg)
	for _, id := range []string{"s1", "s2"} {
		if _, err := resolve(ctx, id); !errors.Is(err, ErrMapRebuilding) || errors.Is(err, noderoute.ErrNotPlaced) {
			t.Fatalf("resolve %s without a session map: %v, want ErrMapRebuilding", id, err)
		}
	}
	if _, err := reg.Restore(ctx, []Assignment{{SessionID: "s1", NodeID: "n1", Tenant: "t"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := resolve(ctx, "s1"); !errors.Is(err, ErrMapRebuilding) || errors.Is(err, noderoute.ErrNotPlaced) {
		t.Fatalf("resolve s1 before its node registered again: %v, want ErrMapRebuilding", err)
	}
	if _, err := resolve(ctx, "s2"); !errors.Is(err, noderoute.ErrNotPlaced) {
		t.Fatalf("resolve a session the rebuilt map does not hold: %v, want ErrNotPlaced", err)
	}
	addNode(t, reg, "n1", 5, nil)
	if addr, err := resolve(ctx, "s1"); err != nil || addr != "127.0.0.1:1n1" {
		t.Fatalf("resolve s1 once its node registered again: %q, %v", addr, err)
	}
}

// forget removes every key of reg's deployment, as a flush or a restart of
// Redis without its data would.
func forget(t *testing.T, rdb *redis.Client, reg *Registry) {
	t.Helper()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, reg.Prefix()+"*", 1000).Iterator()
	var ks []string
	for iter.Next(ctx) {
		ks = append(ks, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ks) > 0 {
		if err := rdb.Del(ctx, ks...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// Redis lost its data: the node records its images again, so placement
// goes on preferring the nodes that hold a session's image (a node that
// cannot pull it, such as one that reaches no registry, is not chosen).
func TestMemberRecordsItsImagesAgainWhenRedisForgets(t *testing.T) {
	reg, rdb := newRegistry(t)
	ctx := context.Background()
	if _, err := reg.Restore(ctx, nil); err != nil {
		t.Fatal(err)
	}
	keys := placement.ImageKeys("t", "docker.io/team/desk:v1")
	cfg := MemberConfig{Node: NodeInfo{ID: "n1", Address: "127.0.0.1:9", Capacity: placement.Capacity{Sessions: 5}},
		Interval: 50 * time.Millisecond, TTL: 500 * time.Millisecond,
		Images: func(context.Context) ([]string, error) { return keys, nil }}
	m, err := Join(ctx, reg, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background(), true) })
	holds := func() bool {
		snap, err := reg.SnapshotFor(ctx, "t", keys)
		return err == nil && len(snap) == 1 && snap[0].Alive && snap[0].HasImage
	}
	testkit.Eventually(t, 10*time.Second, holds, "the node's images recorded")

	forget(t, rdb, reg)
	// A session replica rebuilds the map.
	if _, err := reg.Restore(ctx, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, holds, "the node's images recorded again")
}

// A frozen Redis (it accepts connections and never answers) fails every
// registry call, and so every placement, instead of holding it forever.
func TestRegistryCallsHaveDeadlines(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // read nothing, answer nothing
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: l.Addr().String(), ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	reg := NewRegistry(rdb, "dgtest:frozen:")
	reg.timeout = 200 * time.Millisecond
	// context.Background: only the registry's own deadline can end these.
	_, err = NewPlacer(reg, PlacerConfig{}).Place(context.Background(), placement.Request{SessionID: "s"})
	if !errors.Is(err, placement.ErrUnavailable) {
		t.Fatalf("Place with Redis frozen: %v, want ErrUnavailable", err)
	}
	if _, err := reg.Heartbeat(context.Background(), "n1", "boot", time.Second); err == nil {
		t.Fatal("heartbeat to a frozen Redis succeeded")
	}
}

// A node's recorded images reach the snapshot, and placement prefers the
// node holding the session's image even when it is busier; a member
// records what its node holds and records it again when it changes.
func TestPlacementPrefersNodeWithImage(t *testing.T) {
	reg, _ := newRegistry(t)
	ctx := context.Background()
	addNode(t, reg, "n1", 10, nil)
	addNode(t, reg, "n2", 10, nil)
	img := placement.ImageKeys("acme", "docker.io/team/desk:v1")
	if err := reg.SetImages(ctx, "n2", placement.HeldImageKeys("acme", "docker.io/team/desk:v1", "sha256:aa", false)); err != nil {
		t.Fatal(err)
	}
	snap, err := reg.SnapshotFor(ctx, "", img)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) != 2 || snap[0].HasImage || !snap[1].HasImage {
		t.Fatalf("snapshot %+v", snap)
	}
	if snap, _ := reg.SnapshotFor(ctx, "", placement.ImageKeys("evil", "docker.io/team/desk:v1")); snap[1].HasImage {
		t.Fatal("another tenant's tag counts as holding the image")
	}
	p := NewPlacer(reg, PlacerConfig{Seed: 7})
	// n2 takes sessions of the image up to half its capacity beyond n1's load.
	for i := range 4 {
		n, err := p.Place(ctx, placement.Request{SessionID: fmt.Sprintf("img%d", i), Tenant: "acme", Image: img})
		if err != nil {
			t.Fatal(err)
		}
		if n.ID != "n2" {
			t.Fatalf("session %d of the image placed on %s, want n2 which holds it", i, n.ID)
		}
	}
	// A session without an image goes by load alone.
	if n, err := p.Place(ctx, placement.Request{SessionID: "plain", Tenant: "acme"}); err != nil || n.ID != "n1" {
		t.Fatalf("plain session on %s (%v), want the idle n1", n.ID, err)
	}

	// A member records its node's images at join and after a change.
	var mu sync.Mutex
	held := []string{}
	m, err := Join(ctx, reg, MemberConfig{Node: NodeInfo{ID: "n3", Address: "127.0.0.1:13", Capacity: placement.Capacity{Sessions: 10}},
		Interval: 50 * time.Millisecond, TTL: time.Second,
		Images: func(context.Context) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(held), nil
		}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background(), true) })
	mu.Lock()
	held = placement.HeldImageKeys("acme", "docker.io/team/desk:v1", "sha256:aa", false)
	mu.Unlock()
	testkit.Eventually(t, 5*time.Second, func() bool {
		snap, err := reg.SnapshotFor(ctx, "", img)
		return err == nil && len(snap) == 3 && snap[2].ID == "n3" && snap[2].HasImage
	}, "n3's pulled image recorded")
}
