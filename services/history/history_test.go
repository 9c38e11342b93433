package history_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/history"
	"github.com/deskgrid/deskgrid/services/history/internal/ingest"
	"github.com/deskgrid/deskgrid/services/history/internal/storetest"
	"github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// env is an embedded NATS with JetStream and a client on it.
type env struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	pub *events.NATSPublisher
}

func newEnv(t testing.TB) *env {
	t.Helper()
	_, nc, js := natstest.Start(t)
	return &env{nc: nc, js: js, pub: events.NewPublisher(js)}
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(&tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return discardLogger()
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type tlog struct{ t *testing.T }

func (w *tlog) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func testConfig() history.Config {
	cfg := history.DefaultConfig()
	cfg.BatchWait = 5 * time.Millisecond
	// Short, so events a stopped service held are redelivered quickly.
	cfg.AckWait = time.Second
	cfg.RetryDelay = 50 * time.Millisecond
	return cfg
}

func startService(t *testing.T, e *env, st store.Store, cfg history.Config) *history.Service {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc, err := history.New(ctx, cfg, history.Deps{Logger: testLogger(t), Store: st, JS: e.js})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Close(ctx)
	})
	return svc
}

// client serves svc over a real gRPC connection on loopback.
func client(t *testing.T, svc *history.Service) historyv1.HistoryServiceClient {
	t.Helper()
	cc := grpcservertest.Serve(t, svc.Register, grpcservertest.Options{})
	return historyv1.NewHistoryServiceClient(cc)
}

// publish sends n state-change events for session and returns their ids.
func publish(t *testing.T, e *env, session string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := range n {
		ev, err := e.pub.Publish(context.Background(), events.Meta{
			Type: events.TypeSessionStateChanged, SessionID: session, Tenant: "acme", Sequence: int64(i + 1),
		}, &eventsv1.SessionStateChanged{
			From:   sessionv1.SessionState_SESSION_STATE_STARTING,
			To:     sessionv1.SessionState_SESSION_STATE_RUNNING,
			Reason: fmt.Sprintf("step %d", i),
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ev.GetId())
	}
	return ids
}

func waitCount(t *testing.T, st *store.SQL, want int) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() bool {
		rows, _ := storetest.Count(t, st)
		return rows >= want
	}, fmt.Sprintf("%d entries", want))
	rows, distinct := storetest.Count(t, st)
	if rows != want || distinct != want {
		t.Fatalf("store holds %d rows, %d distinct ids; want %d of each", rows, distinct, want)
	}
}

// listAll reads every entry of a session through gRPC.
func listAll(t *testing.T, c historyv1.HistoryServiceClient, req *historyv1.ListSessionHistoryRequest) []*historyv1.Entry {
	t.Helper()
	var out []*historyv1.Entry
	for {
		resp, err := c.ListSessionHistory(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.GetEntries()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		req = proto.CloneOf(req)
		req.PageToken = resp.GetNextPageToken()
	}
}

func TestIngestStoresEveryEventOnce(t *testing.T) {
	for _, o := range storetest.All {
		t.Run(o.Name, func(t *testing.T) {
			e := newEnv(t)
			st := o.Open(t)
			svc := startService(t, e, st, testConfig())
			c := client(t, svc)

			want := map[string][]string{}
			for _, s := range []string{"sa", "sb", "sc"} {
				want[s] = publish(t, e, s, 300)
			}
			waitCount(t, st, 900)

			for s, ids := range want {
				got := listAll(t, c, &historyv1.ListSessionHistoryRequest{SessionId: s, PageSize: 70})
				if len(got) != len(ids) {
					t.Fatalf("%s: %d entries, want %d", s, len(got), len(ids))
				}
				for i, en := range got {
					// Publish order is stream order.
					if en.GetId() != ids[i] {
						t.Fatalf("%s entry %d is %s, want %s", s, i, en.GetId(), ids[i])
					}
					if i > 0 && en.GetSequence() <= got[i-1].GetSequence() {
						t.Fatalf("%s: sequences not increasing", s)
					}
				}
				first := got[0]
				if first.GetType() != events.TypeSessionStateChanged || first.GetSessionId() != s || first.GetTime() == nil {
					t.Errorf("entry %+v", first)
				}
				fields := first.GetData().GetFields()
				if fields["@type"].GetStringValue() != "type.googleapis.com/deskgrid.events.v1.SessionStateChanged" ||
					fields["to"].GetStringValue() != "SESSION_STATE_RUNNING" || fields["reason"].GetStringValue() != "step 0" {
					t.Errorf("data %v", first.GetData())
				}
			}
			if st := svc.IngestStats(); st.Stored != 900 || st.Rejected != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestRestartLosesNothing stops the service while events keep coming, and
// starts another with the same durable and store: it catches up from
// JetStream and nothing is stored twice.
func TestRestartLosesNothing(t *testing.T) {
	tests := []struct {
		name string
		// stop stops the first service, gracefully or not.
		stop func(svc *history.Service) error
	}{
		{"graceful", func(svc *history.Service) error { return svc.Close(context.Background()) }},
		{"abandoned", func(svc *history.Service) error {
			// An ended ctx abandons the batch in flight unacknowledged.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ignoreCanceled(svc.Close(ctx))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			st := storetest.SQLite(t)
			cfg := testConfig()
			cfg.BatchSize = 32
			svc1 := startService(t, e, st, cfg)

			// Publish continuously from several sessions.
			ctx, stopPub := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var mu sync.Mutex
			published := map[string]bool{}
			for w := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ctx.Err() == nil; i++ {
						ev, err := e.pub.Publish(context.Background(), events.Meta{Type: "agent.step.v1", SessionID: fmt.Sprintf("s%d", w)},
							&eventsv1.SessionStateChanged{Reason: fmt.Sprint(i)})
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						published[ev.GetId()] = true
						mu.Unlock()
					}
				}()
			}
			t.Cleanup(func() { stopPub(); wg.Wait() })
			countPublished := func() int { mu.Lock(); defer mu.Unlock(); return len(published) }

			testkit.Eventually(t, 30*time.Second, func() bool { return svc1.IngestStats().Stored >= 200 }, "the first service to store something")
			if err := tc.stop(svc1); err != nil {
				t.Fatal(err)
			}
			// More events while no history service runs.
			down := countPublished()
			testkit.Eventually(t, 30*time.Second, func() bool { return countPublished() >= down+300 }, "events published while down")

			svc2 := startService(t, e, st, cfg)
			testkit.Eventually(t, 30*time.Second, func() bool { return svc2.IngestStats().Stored > 0 }, "the second service to store something")
			stopPub()
			wg.Wait()

			total := countPublished()
			waitCount(t, st, total)
			rows, err := st.DB().Query("SELECT id FROM history_entries")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				if !published[id] {
					t.Fatalf("stored %s, which was never published", id)
				}
			}
			t.Logf("%d events; first service stored %+v, second %+v", total, svc1.IngestStats(), svc2.IngestStats())
		})
	}
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// TestPoisonMessagesDoNotBlock publishes messages that are not events between
// good ones: they are terminated and the good ones stored.
func TestPoisonMessagesDoNotBlock(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	svc := startService(t, e, st, testConfig())
	ctx := context.Background()

	before := publish(t, e, "s1", 5)
	envelope := func(ev *eventsv1.Event) []byte {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	poison := [][]byte{
		[]byte("not a protobuf"),
		envelope(&eventsv1.Event{Type: "x.v1", SessionId: "s1"}),                // no id
		envelope(&eventsv1.Event{Id: "no-session", Type: "x.v1"}),               // no session
		envelope(&eventsv1.Event{Id: "nul", Type: "x.v1", SessionId: "s\x001"}), // unstorable
	}
	for _, p := range poison {
		if _, err := e.js.Publish(ctx, events.Subject("s1", "x.v1"), p); err != nil {
			t.Fatal(err)
		}
	}
	// A payload type nobody here knows is kept, not refused.
	unknown := &eventsv1.Event{
		Id: "unknown-payload", Type: "future.thing.v3", SessionId: "s1", Time: timestamppb.Now(),
		Payload: &anypb.Any{TypeUrl: "type.googleapis.com/deskgrid.future.v9.Thing", Value: []byte{0x08, 0x96, 0x01}},
	}
	if _, err := e.js.Publish(ctx, events.Subject("s1", "future.thing.v3"), envelope(unknown)); err != nil {
		t.Fatal(err)
	}
	after := publish(t, e, "s1", 5)

	waitCount(t, st, len(before)+1+len(after))
	testkit.Eventually(t, 30*time.Second, func() bool { return svc.IngestStats().Rejected == uint64(len(poison)) }, "poison counted")

	got := listAll(t, client(t, svc), &historyv1.ListSessionHistoryRequest{SessionId: "s1", Types: []string{"future.thing.v3"}})
	if len(got) != 1 {
		t.Fatalf("%d unknown-payload entries", len(got))
	}
	f := got[0].GetData().GetFields()
	if f["@type"].GetStringValue() != unknown.Payload.TypeUrl || f["value"].GetStringValue() != "CJYB" {
		t.Errorf("unknown payload stored as %v", got[0].GetData())
	}

	// Nothing is left waiting for an ack: the poison was terminated.
	cons, err := e.js.Consumer(ctx, events.StreamName, "history")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}, "no pending acks")
}

func TestListSessionHistoryValidation(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	svc := startService(t, e, st, testConfig())
	c := client(t, svc)
	publish(t, e, "s1", 12)
	waitCount(t, st, 12)
	ctx := context.Background()

	first, err := c.ListSessionHistory(ctx, &historyv1.ListSessionHistoryRequest{SessionId: "s1", PageSize: 5})
	if err != nil || len(first.GetEntries()) != 5 || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %v, %v", first, err)
	}
	tok := first.GetNextPageToken()

	tests := []struct {
		name string
		req  *historyv1.ListSessionHistoryRequest
		code codes.Code
		n    int
	}{
		{"default page size", &historyv1.ListSessionHistoryRequest{SessionId: "s1"}, codes.OK, 12},
		{"max page size", &historyv1.ListSessionHistoryRequest{SessionId: "s1", PageSize: 1000}, codes.OK, 12},
		{"next page", &historyv1.ListSessionHistoryRequest{SessionId: "s1", PageSize: 5, PageToken: tok}, codes.OK, 5},
		{"after sequence", &historyv1.ListSessionHistoryRequest{SessionId: "s1", AfterSequence: first.GetEntries()[4].GetSequence()}, codes.OK, 7},
		{"type filter", &historyv1.ListSessionHistoryRequest{SessionId: "s1", Types: []string{"other.v1"}}, codes.OK, 0},
		{"unknown session", &historyv1.ListSessionHistoryRequest{SessionId: "nobody"}, codes.NotFound, 0},
		{"no session", &historyv1.ListSessionHistoryRequest{}, codes.InvalidArgument, 0},
		{"negative page size", &historyv1.ListSessionHistoryRequest{SessionId: "s1", PageSize: -1}, codes.InvalidArgument, 0},
		{"page size too big", &historyv1.ListSessionHistoryRequest{SessionId: "s1", PageSize: 1001}, codes.InvalidArgument, 0},
		{"negative after", &historyv1.ListSessionHistoryRequest{SessionId: "s1", AfterSequence: -1}, codes.InvalidArgument, 0},
		{"garbage token", &historyv1.ListSessionHistoryRequest{SessionId: "s1", PageToken: "%%%"}, codes.InvalidArgument, 0},
		{"token of another session", &historyv1.ListSessionHistoryRequest{SessionId: "s2", PageToken: tok}, codes.InvalidArgument, 0},
		{"token of another filter", &historyv1.ListSessionHistoryRequest{SessionId: "s1", Types: []string{"x.v1"}, PageToken: tok}, codes.InvalidArgument, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.ListSessionHistory(ctx, tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v); want %v", status.Code(err), err, tc.code)
			}
			if err == nil && len(resp.GetEntries()) != tc.n {
				t.Fatalf("%d entries; want %d", len(resp.GetEntries()), tc.n)
			}
		})
	}
}

// flakyStore refuses the first appends, as a database that is restarting.
type flakyStore struct {
	store.Store
	mu       sync.Mutex
	failures int
}

func (f *flakyStore) Append(ctx context.Context, entries []store.Entry) (int, error) {
	f.mu.Lock()
	fail := f.failures > 0
	if fail {
		f.failures--
	}
	f.mu.Unlock()
	if fail {
		return 0, errors.New("database restarting")
	}
	return f.Store.Append(ctx, entries)
}

// TestStoreFailureRedelivers checks that events a failing store refused are
// not acknowledged: they come back and are stored once the store recovers.
func TestStoreFailureRedelivers(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	flaky := &flakyStore{Store: st, failures: 3}
	svc := startService(t, e, flaky, testConfig())
	publish(t, e, "s1", 100)
	waitCount(t, st, 100)
	if got := svc.IngestStats().StoreFailures; got != 3 {
		t.Errorf("%d store failures; want 3", got)
	}
}

// TestRunID checks the two ways an event names its run: a header, or a
// run_id field in its payload.
func TestRunID(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	svc := startService(t, e, st, testConfig())
	ctx := context.Background()

	ev := &eventsv1.Event{Id: "with-header", Type: "agent.step.v1", SessionId: "s1", Time: timestamppb.Now()}
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(events.Subject("s1", ev.Type))
	msg.Data = b
	msg.Header.Set(ingest.HeaderRunID, "run-h")
	if _, err := e.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pub.Publish(ctx, events.Meta{Type: "agent.cancel.v1", SessionID: "s1"}, &agentv1.CancelRunRequest{RunId: "run-p"}); err != nil {
		t.Fatal(err)
	}
	waitCount(t, st, 2)
	got := listAll(t, client(t, svc), &historyv1.ListSessionHistoryRequest{SessionId: "s1"})
	if len(got) != 2 || got[0].GetRunId() != "run-h" || got[1].GetRunId() != "run-p" {
		t.Fatalf("entries %v", got)
	}
	if got[0].GetData() != nil {
		t.Errorf("an event without payload has data %v", got[0].GetData())
	}
}
