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
	"github.com/deskgrid/deskgrid/services/history/internal/storetest"
	"github.com/deskgrid/deskgrid/services/platform/events"
)

// BenchmarkIngestSQLite measures events/s from the stream into SQLite: b.N
// events wait in JetStream, then a history service starts and stores them.
func BenchmarkIngestSQLite(b *testing.B) {
	benchmarkIngest(b, events.TypeSessionStateChanged, &eventsv1.SessionStateChanged{
		From: sessionv1.SessionState_SESSION_STATE_STARTING, To: sessionv1.SessionState_SESSION_STATE_RUNNING,
		Session: &sessionv1.Session{Id: "s-0123456789", Tenant: "acme"},
	})
}

// BenchmarkIngestTrailSQLite is the same for the trail's records of calls
// on a session (an exec with its input and output, searchable text).
func BenchmarkIngestTrailSQLite(b *testing.B) {
	benchmarkIngest(b, "trail.exec.v1", &eventsv1.Call{
		Method: "/deskgrid.sandbox.v1.SandboxService/Exec", Tool: "sandbox.Exec",
		Caller:         &eventsv1.Caller{Tenant: "acme", KeyId: "k0123456789"},
		Input:          `{"sessionId":"s-0123456789","argv":["sh","-c","ls -la /home/user && cat notes.txt"],"env":["LANG=…"]}`,
		Output:         `{"stdout":"total 12\ndrwxr-xr-x 2 user user 4096 notes.txt\nremember the milk\n"}` + "\n" + `{"exit":{"code":0}}`,
		DurationMicros: 4200,
	})
}

func benchmarkIngest(b *testing.B, typ string, msg proto.Message) {
	e := newEnv(b)
	st := storetest.SQLite(b)
	ctx := context.Background()
	if _, err := events.EnsureStream(ctx, e.js, events.StreamConfig(1, 0)); err != nil {
		b.Fatal(err)
	}
	payload, err := anypb.New(msg)
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		ev := &eventsv1.Event{
			Id: fmt.Sprintf("ev-%d", i), Type: typ, Time: timestamppb.Now(),
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
