package cluster

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/deskgrid/deskgrid/services/platform/metrics/metricstest"
	"github.com/deskgrid/deskgrid/services/session/placement"
)

// reader holds what the package's code recorded.
var reader = metricstest.Global()

// placements reads deskgrid_placement_decisions_total by outcome and
// deskgrid_placement_retries_total by reason.
func placements(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, o := range []string{"placed", "no_capacity", "no_matching_node", "unavailable", "cancelled"} {
		out[o] = metricstest.Sum(t, reader, "deskgrid.placement.decisions", attribute.String("outcome", o))
	}
	for _, r := range []string{"reservation_refused", "stale_snapshot"} {
		out["retry "+r] = metricstest.Sum(t, reader, "deskgrid.placement.retries", attribute.String("reason", r))
	}
	return out
}

// Each placement is counted once by its outcome, and a reservation another
// replica's placement beat is counted as a retry.
func TestPlacementMetrics(t *testing.T) {
	reg, _ := newRegistry(t)
	ctx := context.Background()
	addNode(t, reg, "a", 2, map[string]string{"region": "eu"})
	// stale keeps its snapshot for a minute: it sees the room it saw.
	stale := NewPlacer(reg, PlacerConfig{Seed: 1, SnapshotMaxAge: time.Minute})
	other := NewPlacer(reg, PlacerConfig{Seed: 2, SnapshotMaxAge: -1})
	before := placements(t)
	delta := func() map[string]int64 {
		now := placements(t)
		d := map[string]int64{}
		for k, v := range now {
			if v != before[k] {
				d[k] = v - before[k]
			}
		}
		return d
	}
	expect := func(what string, want map[string]int64) {
		t.Helper()
		got := delta()
		if len(got) != len(want) {
			t.Fatalf("%s: counted %v, want %v", what, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%s: counted %v, want %v", what, got, want)
			}
		}
	}

	if _, err := stale.Place(ctx, placement.Request{SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	// A retried call finds its placement: placed again, once.
	if _, err := stale.Place(ctx, placement.Request{SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	expect("two placements", map[string]int64{"placed": 2})

	// The other replica takes the last room; stale's cached view still
	// shows it, so its reservation is refused and it looks again.
	if _, err := other.Place(ctx, placement.Request{SessionID: "s2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Place(ctx, placement.Request{SessionID: "s3"}); !errors.Is(err, placement.ErrNoCapacity) {
		t.Fatalf("placement on a full node: %v, want ErrNoCapacity", err)
	}
	expect("a full node", map[string]int64{"placed": 3, "no_capacity": 1, "retry reservation_refused": 1})

	if _, err := other.Place(ctx, placement.Request{SessionID: "s4", NodeSelector: map[string]string{"region": "us"}}); !errors.Is(err, placement.ErrNoMatchingNode) {
		t.Fatalf("placement in another region: %v, want ErrNoMatchingNode", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := other.Place(cctx, placement.Request{SessionID: "s5"}); err == nil {
		t.Fatal("a cancelled placement succeeded")
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	if _, err := NewPlacer(NewRegistry(rdb, "dgtest:down:"), PlacerConfig{}).Place(ctx, placement.Request{SessionID: "s6"}); !errors.Is(err, placement.ErrUnavailable) {
		t.Fatalf("placement with Redis down: %v, want ErrUnavailable", err)
	}
	expect("every outcome", map[string]int64{"placed": 3, "no_capacity": 1, "retry reservation_refused": 1,
		"no_matching_node": 1, "cancelled": 1, "unavailable": 1})
}
