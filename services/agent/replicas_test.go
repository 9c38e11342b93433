package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/agent/lease"
)

// testRedis is the test Redis (DESKGRID_TEST_REDIS_URL, default the local
// one) and a key prefix of the test's own, removed at the end.
func testRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	url := os.Getenv("DESKGRID_TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "dgtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		if keys, _ := rdb.Keys(ctx, prefix+"*").Result(); len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		rdb.Close()
	})
	return rdb, prefix
}

// Two agent replicas sharing Redis grant one holder per session between
// them, and a replica started after another stopped hands out fencing
// tokens the display (which saw the old ones) accepts.
func TestLeasesSpanReplicasAndSurviveRestarts(t *testing.T) {
	rdb, prefix := testRedis(t)
	node := newFakeNode()
	conn := startNode(t, node)
	replica := func(p provider.Provider) *harness {
		return newHarness(t, DefaultConfig(), fixed(p), func(d *Deps) {
			d.Display = displayv1.NewDisplayServiceClient(conn)
			d.Sandbox = sandboxv1.NewSandboxServiceClient(conn)
			l, err := lease.NewRedis(rdb, prefix)
			if err != nil {
				t.Fatal(err)
			}
			d.Leases = l
		})
	}
	click := func() *scripted {
		return &scripted{turns: []func(provider.Request) (*provider.Response, error){
			toolTurn(call("t1", "computer", `{"action":"left_click","coordinate":[10,20]}`)),
		}}
	}
	a, b := replica(click()), replica(click())
	ctx := context.Background()

	held, err := a.client.AcquireInputLease(ctx, &agentv1.AcquireInputLeaseRequest{SessionId: "s-1", Holder: "person", Ttl: durationMs(60_000)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.AcquireInputLease(ctx, &agentv1.AcquireInputLeaseRequest{SessionId: "s-1", Holder: "other", Wait: durationMs(300)}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a second holder through the other replica: %v", err)
	}
	// A run on the other replica waits for the person's lease.
	run, err := b.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "click"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for n := int64(0); n != 1; {
		if n, err = rdb.LLen(ctx, prefix+"lease:s-1:queue").Result(); err != nil || time.Now().After(deadline) {
			t.Fatalf("the run never queued for the lease: %d, %v", n, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	node.mu.Lock()
	acted := len(node.actions)
	node.mu.Unlock()
	if acted != 0 {
		t.Fatalf("the run acted while another replica's holder had the lease")
	}
	// Released through replica b, with the id replica a gave.
	if _, err := b.client.ReleaseInputLease(ctx, &agentv1.ReleaseInputLeaseRequest{SessionId: "s-1", LeaseId: held.GetLease().GetLeaseId()}); err != nil {
		t.Fatal(err)
	}
	done := waitState(t, b.client, run.GetRun().GetId(), agentv1.RunState_RUN_STATE_SUCCEEDED, agentv1.RunState_RUN_STATE_FAILED)
	if done.GetState() != agentv1.RunState_RUN_STATE_SUCCEEDED {
		t.Fatalf("run on replica b: %v %s", done.GetState(), done.GetStateReason())
	}
	node.mu.Lock()
	seen := node.token
	node.mu.Unlock()
	if seen <= held.GetLease().GetToken() {
		t.Fatalf("the display saw token %d, not newer than %d", seen, held.GetLease().GetToken())
	}

	// Both replicas stop; a new one starts with nothing in memory.
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, h := range []*harness{a, b} {
		if err := h.svc.Close(closeCtx); err != nil {
			t.Fatal(err)
		}
	}
	c := replica(click())
	run, err = c.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "click again"})
	if err != nil {
		t.Fatal(err)
	}
	done = waitState(t, c.client, run.GetRun().GetId(), agentv1.RunState_RUN_STATE_SUCCEEDED, agentv1.RunState_RUN_STATE_FAILED)
	if done.GetState() != agentv1.RunState_RUN_STATE_SUCCEEDED {
		t.Fatalf("run after the restart (the display refused its token?): %v %s", done.GetState(), done.GetStateReason())
	}
	node.mu.Lock()
	defer node.mu.Unlock()
	if node.token <= seen || len(node.actions) != 2 {
		t.Fatalf("after the restart the display saw token %d (before %d), %d actions", node.token, seen, len(node.actions))
	}
}
