package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/platform/metrics/metricstest"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
)

// reader holds what the package's code recorded.
var reader = metricstest.Global()

// sum adds the int64 counter points of name whose attributes include want.
func sum(t *testing.T, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	return metricstest.Sum(t, reader, name, want...)
}

func TestReason(t *testing.T) {
	for reason, want := range map[string]string{
		"":                          "none",
		"deleted":                   "deleted",
		"ttl expired":               "ttl",
		"idle timeout":              "idle",
		"create abandoned":          "stale",
		"node heartbeat expired":    "node_lost",
		"node restarted":            "node_lost",
		"suspend failed: boom":      "suspend",
		"placement: no node fits":   "placement",
		"context deadline exceeded": "timeout",
		"node n1: create sandbox: image x: not found": "image",
		"node n1: create display: refused":            "node",
		"something else":                              "other",
	} {
		if got := metrics.Reason(reason); got != want {
			t.Errorf("Reason(%q) = %q, want %q", reason, got, want)
		}
	}
}

// State changes and token usage are counted from the events as published,
// with bounded labels; a publish NATS refuses is counted as a failure.
func TestCountEvents(t *testing.T) {
	_, nc, js := natstest.Start(t)
	ctx := context.Background()
	pub := events.NewPublisher(js)

	// No stream yet: JetStream does not take the event.
	if _, err := pub.Publish(ctx, events.Meta{Type: events.TypeSessionStateChanged, SessionID: "s0"}, nil); err == nil {
		t.Fatal("publish without a stream succeeded")
	}
	if n := sum(t, "deskgrid.events.publish.failures", attribute.String("type", events.TypeSessionStateChanged)); n != 1 {
		t.Errorf("publish failures = %d, want 1", n)
	}

	if _, err := events.EnsureStream(ctx, js, events.StreamConfig(1, time.Hour)); err != nil {
		t.Fatal(err)
	}
	stop, err := metrics.CountEvents(nc, metrics.EventKinds{Sessions: true, Runs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	if _, err := pub.Publish(ctx, events.Meta{Type: events.TypeSessionStateChanged, SessionID: "s1", Tenant: "acme"},
		&eventsv1.SessionStateChanged{To: sessionv1.SessionState_SESSION_STATE_LOST, Reason: "node heartbeat expired"}); err != nil {
		t.Fatal(err)
	}
	run := func(typ string, rec *agentv1.RunEventRecord) {
		a, _ := anypb.New(rec)
		b, _ := proto.Marshal(&eventsv1.Event{Id: events.NewID(), Type: typ, SessionId: "s1", Tenant: "acme", RunId: "r1", Payload: a})
		if err := nc.PublishMsg(&nats.Msg{Subject: events.Subject("s1", typ), Data: b}); err != nil {
			t.Fatal(err)
		}
	}
	run("agent.run_state_changed.v1", &agentv1.RunEventRecord{RunId: "r1", State: agentv1.RunState_RUN_STATE_SUCCEEDED, Provider: "anthropic"})
	run("agent.usage.v1", &agentv1.RunEventRecord{RunId: "r1", Provider: "my-proxy", InputTokens: 7, OutputTokens: 3})

	deadline := time.Now().Add(10 * time.Second)
	for {
		lost := sum(t, "deskgrid.session.transitions", attribute.String("state", "lost"), attribute.String("reason", "node_lost"))
		runs := sum(t, "deskgrid.agent.run.transitions", attribute.String("state", "succeeded"), attribute.String("provider", "anthropic"))
		in := sum(t, "deskgrid.agent.tokens", attribute.String("provider", "other"), attribute.String("kind", "input"))
		out := sum(t, "deskgrid.agent.tokens", attribute.String("provider", "other"), attribute.String("kind", "output"))
		if lost == 1 && runs == 1 && in == 7 && out == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lost %d, runs %d, tokens in %d out %d", lost, runs, in, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
