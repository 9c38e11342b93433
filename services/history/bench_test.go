package history_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/history"
	"github.com/deskgrid/deskgrid/services/history/store/storetest"
	"github.com/deskgrid/deskgrid/services/platform/events"
)

// BenchmarkIngestSQLite measures events/s from the stream into SQLite: b.N
// events wait in JetStream, then a history service starts and stores them.
func BenchmarkIngestSQLite(b *testing.B) {
	e := newEnv(b)
	st := storetest.SQLite(b)
	ctx := context.Background()
	if _, err := events.EnsureStream(ctx, e.js, events.StreamConfig(1, 0)); err != nil {
		b.Fatal(err)
	}
	payload, err := anypb.New(&eventsv1.SessionStateChanged{
		From: sessionv1.SessionState_SESSION_STATE_STARTING, To: sessionv1.SessionState_SESSION_STATE_RUNNING,
		Session: &sessionv1.Session{Id: "s-0123456789", Tenant: "acme"},
	})
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		ev := &eventsv1.Event{
			Id: fmt.Sprintf("ev-%d", i), Type: events.TypeSessionStateChanged, Time: timestamppb.Now(),
			Tenant: "acme", SessionId: fmt.Sprintf("s%d", i%64), Payload: payload,
		}
		data, err := proto.Marshal(ev)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.js.PublishAsync(events.Subject(ev.SessionId, ev.Type), data, jetstream.WithMsgID(ev.Id)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishing did not complete")
	}

	b.ResetTimer()
	start := time.Now()
	cfg := history.DefaultConfig()
	svc, err := history.New(ctx, cfg, history.Deps{Logger: discardLogger(), Store: st, JS: e.js})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close(ctx)
	for svc.IngestStats().Stored < uint64(b.N) {
		if time.Since(start) > 5*time.Minute {
			b.Fatalf("stored %d of %d", svc.IngestStats().Stored, b.N)
		}
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}
