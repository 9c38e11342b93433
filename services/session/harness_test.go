package session

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/activity"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/authtest"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore/sqlstoretest"
	"github.com/deskgrid/deskgrid/services/session/placement"
	"github.com/deskgrid/deskgrid/services/session/store"
)

// harness is a session service on real gRPC, a real SQLite store and an
// in-process NATS, with fake nodes.
type harness struct {
	svc    *Service
	client sessionv1.SessionServiceClient
	store  store.Store
	placer *placement.Local
	node   *fakeNode
	nodes  fakeNodes
	nc     *nats.Conn
}

type option func(*Config, *harnessOpts)

type harnessOpts struct {
	capacity int
	// activity: the service hears activity reports sent at this interval.
	activity  time.Duration
	openStore func(testing.TB) store.Store
	// tenancy: tenantFromMD unless set.
	tenancy auth.Tenancy
}

// tenantFromMD is the tests' Tenancy: the tenant a test puts in the call's
// metadata, standing in for the authenticated principal, and DefaultTenant
// for a call without it.
func tenantFromMD(ctx context.Context) auth.Caller {
	if t := authtest.Tenant(ctx); t != "" {
		return auth.ForTenant(t)
	}
	return auth.ForTenant(DefaultTenant)
}

func withTenancy(t auth.Tenancy) option {
	return func(_ *Config, o *harnessOpts) { o.tenancy = t }
}

func withStore(open func(testing.TB) store.Store) option {
	return func(_ *Config, o *harnessOpts) { o.openStore = open }
}

func withConfig(f func(*Config)) option { return func(c *Config, _ *harnessOpts) { f(c) } }
func withActivity(interval time.Duration) option {
	return func(_ *Config, o *harnessOpts) { o.activity = interval }
}
func withCapacity(n int) option { return func(_ *Config, o *harnessOpts) { o.capacity = n } }

func newHarness(t testing.TB, opts ...option) *harness {
	t.Helper()
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.ReapInterval = 0
	ho := harnessOpts{capacity: 100, tenancy: tenantFromMD}
	for _, o := range opts {
		o(&cfg, &ho)
	}

	_, nc, js := natstest.Start(t)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig(1, time.Hour)); err != nil {
		t.Fatal(err)
	}

	if ho.openStore == nil {
		ho.openStore = openSQLite
	}
	st := ho.openStore(t)

	h := &harness{
		store:  st,
		placer: placement.NewLocal(placement.Node{ID: "node-1", Address: "local"}, ho.capacity, placement.WithLabels(map[string]string{"zone": "a"})),
		node:   newFakeNode(),
		nc:     nc,
	}
	h.nodes = fakeNodes{"node-1": h.node}
	var usage Activity
	if ho.activity > 0 {
		m, err := activity.NewMonitor(activity.MonitorConfig{Interval: ho.activity}, activity.MonitorDeps{NATS: nc})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		usage = m
	}
	var err error
	h.svc, err = New(ctx, cfg, Deps{
		Activity: usage,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Store:    st,
		Placer:   h.placer,
		Nodes:    h.nodes,
		Events:   events.NewPublisher(js),
		NATS:     nc,
		Tenancy:  ho.tenancy,
	})
	if err != nil {
		t.Fatal(err)
	}

	srv := grpcservertest.Start(t, h.svc.Register, grpcservertest.Options{})
	// Cleanups run last-in first-out: the client, then the service, then
	// the server, then the store and NATS registered above.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.svc.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	cc := srv.Dial(t)
	h.client = sessionv1.NewSessionServiceClient(cc)
	return h
}

func openSQLite(t testing.TB) store.Store {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "sessions.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// openPostgres opens a store in a schema of its own, dropped when the test ends.
func openPostgres(t testing.TB) store.Store {
	t.Helper()
	ctx := context.Background()
	_, dsn := sqlstoretest.Schema(t, "session_svc_test")
	st, err := store.OpenPostgres(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// recorder collects every state-change event published.
type recorder struct {
	mu     sync.Mutex
	events []*eventsv1.SessionStateChanged
}

func (h *harness) record(t testing.TB) *recorder {
	t.Helper()
	r := &recorder{}
	sub, err := h.nc.Subscribe(events.SubjectAll, func(m *nats.Msg) {
		_, ev, err := events.Decode(context.Background(), m.Data, m.Header)
		if err != nil || ev.GetType() != events.TypeSessionStateChanged {
			return
		}
		var p eventsv1.SessionStateChanged
		if err := ev.GetPayload().UnmarshalTo(&p); err != nil {
			return
		}
		r.mu.Lock()
		r.events = append(r.events, proto.Clone(&p).(*eventsv1.SessionStateChanged))
		r.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return r
}

// of returns the events about one session.
func (r *recorder) of(id string) []*eventsv1.SessionStateChanged {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*eventsv1.SessionStateChanged
	for _, e := range r.events {
		if e.GetSession().GetId() == id {
			out = append(out, e)
		}
	}
	return out
}

func asTenant(ctx context.Context, tenant string) context.Context {
	return authtest.As(ctx, tenant)
}

// manualClock is a clock tests move by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
