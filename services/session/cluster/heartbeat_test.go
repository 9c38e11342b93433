package cluster

import (
	"context"
	"testing"
	"time"
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
