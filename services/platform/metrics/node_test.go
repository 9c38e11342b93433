package metrics_test

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/platform/metrics/metricstest"
)

// age reads the heartbeat age reported for node.
func age(t *testing.T, node string) (float64, bool) {
	t.Helper()
	return metricstest.Gauge(t, reader, "deskgrid.node.heartbeat.age", attribute.String("node", node))
}

// The heartbeat age is the time since the node's last good heartbeat, read
// at each collection; it stops being reported when the node stops it.
func TestHeartbeatAge(t *testing.T) {
	last := time.Now().Add(-42 * time.Second)
	stop, err := metrics.ObserveHeartbeat("hb-node", func() time.Time { return last })
	if err != nil {
		t.Fatal(err)
	}
	a, ok := age(t, "hb-node")
	if !ok || a < 42 || a > 42+60 {
		t.Fatalf("age = %v (%v), want about 42", a, ok)
	}
	last = time.Now()
	if a, _ := age(t, "hb-node"); a >= 42 {
		t.Fatalf("age after a heartbeat = %v", a)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, ok := age(t, "hb-node"); ok {
		t.Fatal("age still reported after stop")
	}
}

// Limit events are node counters taken from the node's running tally.
func TestSandboxLimitEvents(t *testing.T) {
	ev := metrics.SandboxLimitEvents{OOMKills: 3, PidsLimitHits: 7, DiskFull: 2}
	stop, err := metrics.ObserveSandboxLimits("limits-node", func() metrics.SandboxLimitEvents { return ev })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	node := attribute.String("node", "limits-node")
	if o, p, d := sum(t, "deskgrid.sandbox.oom_kills", node), sum(t, "deskgrid.sandbox.pids_limit_hits", node), sum(t, "deskgrid.sandbox.disk_full", node); o != 3 || p != 7 || d != 2 {
		t.Fatalf("oom %d, pids %d, disk full %d", o, p, d)
	}
	ev.OOMKills = 4
	if o := sum(t, "deskgrid.sandbox.oom_kills", node); o != 4 {
		t.Fatalf("oom %d after one more kill", o)
	}
}

// A model gets a label of its own once a provider answered for it, up to
// the bound; the rest are "other".
func TestModelLabels(t *testing.T) {
	m := metrics.ModelLabels{Max: 2}
	for _, c := range []struct {
		model    string
		answered bool
		want     string
	}{
		{"made-up", false, "other"},
		{"", true, "unknown"},
		{"claude-a", true, "claude-a"},
		{"claude-a", false, "claude-a"},
		{strings.Repeat("x", 101), true, "other"},
		{"gpt-b", true, "gpt-b"},
		{"gemini-c", true, "other"}, // the bound is reached
		{"gpt-b", false, "gpt-b"},
	} {
		if got := m.Label(c.model, c.answered); got != c.want {
			t.Errorf("Label(%.20q, %v) = %q, want %q", c.model, c.answered, got, c.want)
		}
	}
}
