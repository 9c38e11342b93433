package runlog

import (
	"context"
	"testing"
	"time"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
)

// BenchmarkPublishToJetStream: events appended to a run's log until every
// one is acknowledged by JetStream.
func BenchmarkPublishToJetStream(b *testing.B) {
	js := startJetStream(b)
	l := newJetStreamLog(b, js, "run-bench", 4096)
	b.ResetTimer()
	t0 := time.Now()
	for range b.N {
		l.Append(&agentv1.RunEvent{Event: &agentv1.RunEvent_TextDelta{TextDelta: "0123456789abcdef0123456789abcdef"}, Step: 1})
	}
	l.Finish()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "events/s")
}
