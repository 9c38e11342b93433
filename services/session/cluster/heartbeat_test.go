package cluster

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deskgrid/deskgrid/services/platform/testkit"
	"github.com/deskgrid/deskgrid/services/session/placement"
)

// A heartbeat sent into a network partition, whose answer never came
// back, may reach Redis once the network heals, after the key expired and
// the node's sessions were given up: the node's next heartbeat still says
// it rejoined, so it reconciles.
func TestHeartbeatRenewedBehindTheNodesBack(t *testing.T) {
	reg, _ := newRegistry(t)
	ctx := context.Background()
	const ttl = time.Minute
	beat := func(value, prev string) bool {
		t.Helper()
		rejoined, err := reg.HeartbeatAfter(ctx, "n1", value, prev, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return rejoined
	}
	if !beat("b.1", "") {
		t.Fatal("first heartbeat: not rejoined")
	}
	if beat("b.2", "b.1") {
		t.Fatal("a heartbeat after one that succeeded: rejoined")
	}
	// Expired: the control plane declared the node gone.
	if err := reg.Leave(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	beat("b.3", "b.2") // the lost one, delivered late: the node never saw it succeed
	if !beat("b.4", "b.2") {
		t.Fatal("the heartbeat after one renewed the key behind the node's back: not rejoined")
	}
	if beat("b.5", "b.4") {
		t.Fatal("then: rejoined again")
	}
	// Heartbeat, with one value for every beat, keeps its meaning.
	if !func() bool { r, _ := reg.Heartbeat(ctx, "n2", "boot", ttl); return r }() {
		t.Fatal("Heartbeat: first not rejoined")
	}
	if r, err := reg.Heartbeat(ctx, "n2", "boot", ttl); err != nil || r {
		t.Fatalf("Heartbeat again: %v, %v", r, err)
	}
}

// unreachable fails every command of a client while it is set, as a Redis
// that stopped answering would.
type unreachable struct{ down atomic.Bool }

func (u *unreachable) Allow() error {
	if u.down.Load() {
		return errors.New("redis unreachable")
	}
	return nil
}
func (u *unreachable) ReportResult(error) {}

// unreachableRegistry is a node's own registry on the keys of reg (removed
// after the test), through a client whose Redis stops answering while lim
// is set.
func unreachableRegistry(t *testing.T, reg *Registry) (*Registry, *unreachable) {
	t.Helper()
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	lim := &unreachable{}
	opt.Limiter = lim
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return NewRegistry(rdb, string(reg.k)), lim
}

// LastHeartbeat, which the node exports as its heartbeat age, moves with
// every heartbeat that succeeds and stands still while Redis does not
// answer the node.
func TestLastHeartbeatStandsStillWhileRedisIsUnreachable(t *testing.T) {
	reg, _ := newRegistry(t)
	nodeReg, lim := unreachableRegistry(t, reg)
	m, err := Join(context.Background(), nodeReg, MemberConfig{Node: NodeInfo{ID: "n1", Address: "127.0.0.1:9", Capacity: placement.Capacity{Sessions: 1}},
		Interval: 20 * time.Millisecond, TTL: time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.down.Store(false); _ = m.Close(context.Background(), true) })
	first := m.LastHeartbeat()
	if first.IsZero() || first.Unix() <= 0 {
		t.Fatalf("no heartbeat recorded after Join: %v", first)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return m.LastHeartbeat().After(first) }, "a later heartbeat")

	lim.down.Store(true)
	// A heartbeat in flight may still land; then nothing moves.
	stuck := m.LastHeartbeat()
	testkit.Eventually(t, 10*time.Second, func() bool {
		if !m.LastHeartbeat().Equal(stuck) {
			stuck = m.LastHeartbeat()
			return false
		}
		return time.Since(stuck) > 10*20*time.Millisecond
	}, "the heartbeat to go stale")
	if got := m.LastHeartbeat(); !got.Equal(stuck) {
		t.Fatalf("a heartbeat succeeded while Redis was unreachable: %v after %v", got, stuck)
	}

	lim.down.Store(false)
	testkit.Eventually(t, 10*time.Second, func() bool { return m.LastHeartbeat().After(stuck) }, "a heartbeat once Redis answers")
}

// A node started while Redis does not answer joins once it does, within
// JoinTimeout; after JoinTimeout it gives up with Redis's error.
func TestJoinWaitsOutAShortRedisOutage(t *testing.T) {
	reg, _ := newRegistry(t)
	nodeReg, lim := unreachableRegistry(t, reg)
	cfg := MemberConfig{Node: NodeInfo{ID: "n1", Address: "127.0.0.1:9", Capacity: placement.Capacity{Sessions: 1}},
		Interval: 20 * time.Millisecond, TTL: time.Second, JoinTimeout: 10 * time.Second}

	lim.down.Store(true)
	reconciled := make(chan struct{}, 16)
	time.AfterFunc(300*time.Millisecond, func() { lim.down.Store(false) })
	m, err := Join(context.Background(), nodeReg, cfg, nil, func(context.Context, map[string]bool) error {
		reconciled <- struct{}{}
		return nil
	})
	if err != nil {
		t.Fatalf("join across a short outage: %v", err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background(), true) })
	if len(reconciled) == 0 {
		t.Fatal("joined without reconciling")
	}
	if n, err := reg.Node(context.Background(), "n1"); err != nil || !n.Alive {
		t.Fatalf("after the join: %+v, %v", n, err)
	}

	lim.down.Store(true)
	cfg.Node.ID, cfg.JoinTimeout = "n2", 200*time.Millisecond
	if _, err := Join(context.Background(), nodeReg, cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "redis unreachable") {
		t.Fatalf("join with Redis down past the timeout: %v, want Redis's error", err)
	}
	lim.down.Store(false)
	if n, err := reg.Node(context.Background(), "n2"); err == nil && n.Alive {
		t.Fatal("a node that gave up joining is alive")
	}
}
