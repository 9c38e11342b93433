package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore/sqlstoretest"
	"github.com/deskgrid/deskgrid/services/session/state"
	"github.com/deskgrid/deskgrid/services/session/store"
)

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
	_, dsn := sqlstoretest.Schema(t, "session_test")
	st, err := store.OpenPostgres(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the schema's cleanup, so it runs before the drop.
	t.Cleanup(func() { _ = st.Close() })
	return st
}

var backends = []struct {
	name string
	open func(testing.TB) store.Store
}{
	{"sqlite", openSQLite},
	{"postgres", openPostgres},
}

func TestStore(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					c.run(t, b.open(t))
				})
			}
		})
	}
}

var base = time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)

func newSession(id string, created time.Time, st sessionv1.SessionState, labels map[string]string) *sessionv1.Session {
	return &sessionv1.Session{
		Id:             id,
		Tenant:         "acme",
		State:          st,
		Labels:         labels,
		Display:        &sessionv1.DisplaySpec{Width: proto.Int32(1280), Height: proto.Int32(800), Depth: proto.Int32(24)},
		Ttl:            durationpb.New(time.Hour),
		IdleTimeout:    durationpb.New(15 * time.Minute),
		CreateTime:     timestamppb.New(created),
		UpdateTime:     timestamppb.New(created),
		ExpireTime:     timestamppb.New(created.Add(time.Hour)),
		LastActiveTime: timestamppb.New(created),
		Generation:     1,
	}
}

func ids(ss []*sessionv1.Session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.GetId()
	}
	return out
}

func equalIDs(t *testing.T, got []*sessionv1.Session, want ...string) {
	t.Helper()
	g := ids(got)
	if fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", g, want)
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, st store.Store)
}{
	{"CreateGetRoundTrip", func(t *testing.T, st store.Store) {
		ctx := context.Background()
		s := newSession("s-a", base, state.Pending, map[string]string{"team": "x", "app/kind": "browser"})
		s.NodeSelector = map[string]string{"gpu": "no"}
		s.Autostart = []string{"xterm"}
		if err := st.Create(ctx, s, "req-1"); err != nil {
			t.Fatal(err)
		}
		got, err := st.Get(ctx, "s-a")
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, s) {
			t.Fatalf("round trip changed the session:\n got %v\nwant %v", got, s)
		}
		if _, err := st.Get(ctx, "s-missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get missing: %v, want ErrNotFound", err)
		}
	}},
	{"CreateDuplicate", func(t *testing.T, st store.Store) {
		ctx := context.Background()
		if err := st.Create(ctx, newSession("s-a", base, state.Pending, nil), "req-1"); err != nil {
			t.Fatal(err)
		}
		if err := st.Create(ctx, newSession("s-a", base, state.Pending, nil), ""); !errors.Is(err, store.ErrAlreadyExists) {
			t.Fatalf("same id: %v, want ErrAlreadyExists", err)
		}
		if err := st.Create(ctx, newSession("s-b", base, state.Pending, nil), "req-1"); !errors.Is(err, store.ErrAlreadyExists) {
			t.Fatalf("same request id: %v, want ErrAlreadyExists", err)
		}
		// The request id is unique per tenant only.
		other := newSession("s-c", base, state.Pending, nil)
		other.Tenant = "globex"
		if err := st.Create(ctx, other, "req-1"); err != nil {
			t.Fatalf("other tenant, same request id: %v", err)
		}
		// Sessions without a request id never collide.
		for _, id := range []string{"s-d", "s-e"} {
			if err := st.Create(ctx, newSession(id, base, state.Pending, nil), ""); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{"FindByRequestID", func(t *testing.T, st store.Store) {
		ctx := context.Background()
		if err := st.Create(ctx, newSession("s-a", base, state.Pending, nil), "req-1"); err != nil {
			t.Fatal(err)
		}
		got, err := st.FindByRequestID(ctx, "acme", "req-1")
		if err != nil || got.GetId() != "s-a" {
			t.Fatalf("FindByRequestID = %v, %v", got, err)
		}
		if _, err := st.FindByRequestID(ctx, "globex", "req-1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("other tenant: %v, want ErrNotFound", err)
		}
		if _, err := st.FindByRequestID(ctx, "acme", "req-2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown request: %v, want ErrNotFound", err)
		}
	}},
	{"UpdateOptimistic", func(t *testing.T, st store.Store) {
		ctx := context.Background()
		s := newSession("s-a", base, state.Pending, map[string]string{"k": "v"})
		if err := st.Create(ctx, s, ""); err != nil {
			t.Fatal(err)
		}
		u := proto.Clone(s).(*sessionv1.Session)
		u.State = state.Starting
		u.NodeId = "node-1"
		u.Generation = 2
		if err := st.Update(ctx, u, 1); err != nil {
			t.Fatal(err)
		}
		got, _ := st.Get(ctx, "s-a")
		if !proto.Equal(got, u) {
			t.Fatalf("after update got %v, want %v", got, u)
		}
		stale := proto.Clone(s).(*sessionv1.Session)
		stale.State = state.Failed
		stale.Generation = 2
		if err := st.Update(ctx, stale, 1); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("stale update: %v, want ErrConflict", err)
		}
		missing := newSession("s-missing", base, state.Running, nil)
		if err := st.Update(ctx, missing, 1); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("update missing: %v, want ErrNotFound", err)
		}
		// Labels written at creation still filter after updates.
		page, _, err := st.List(ctx, store.Filter{Labels: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		equalIDs(t, page, "s-a")
	}},
	{"ConcurrentUpdatesOneWins", func(t *testing.T, st store.Store) {
		ctx := context.Background()
		s := newSession("s-a", base, state.Running, nil)
		if err := st.Create(ctx, s, ""); err != nil {
			t.Fatal(err)
		}
		const n = 8
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			wins     int
			conflict int
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				u := proto.Clone(s).(*sessionv1.Session)
				u.StateReason = fmt.Sprint("writer ", i)
				u.Generation = 2
				err := st.Update(ctx, u, 1)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, store.ErrConflict):
					conflict++
				default:
					t.Errorf("update: %v", err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 || conflict != n-1 {
			t.Fatalf("wins=%d conflicts=%d, want 1 and %d", wins, conflict, n-1)
		}
	}},
	{"ListPagingAndOrder", func(t *testing.T, st store.Store) {
		ctx := context.Background()
		// Two sessions share a create time, so the id breaks the tie.
		times := map[string]time.Time{
			"s-1": base, "s-2": base.Add(time.Second), "s-3": base.Add(2 * time.Second),
			"s-4": base.Add(2 * time.Second), "s-5": base.Add(3 * time.Second),
		}
		for id, ct := range times {
			if err := st.Create(ctx, newSession(id, ct, state.Running, nil), ""); err != nil {
				t.Fatal(err)
			}
		}
		var all []*sessionv1.Session
		f := store.Filter{PageSize: 2}
		pages := 0
		for {
			page, next, err := st.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			all = append(all, page...)
			if next == "" {
				break
			}
			f.PageToken = next
		}
		equalIDs(t, all, "s-5", "s-4", "s-3", "s-2", "s-1")
		if pages != 3 {
			t.Fatalf("%d pages, want 3", pages)
		}
		// An exact fit ends with an empty token.
		page, next, err := st.List(ctx, store.Filter{PageSize: 5})
		if err != nil || len(page) != 5 || next != "" {
			t.Fatalf("exact page: %d sessions, next %q, err %v", len(page), next, err)
		}
		page, next, err = st.List(ctx, store.Filter{})
		if err != nil || len(page) != 5 || next != "" {
			t.Fatalf("default page: %d sessions, next %q, err %v", len(page), next, err)
		}
	}},
	{"ListFilters", func(t *testing.T, st store.Store) {
		ctx := context.Background()
		mk := func(id string, sec int, s sessionv1.SessionState, tenant, node string, labels map[string]string) {
			sess := newSession(id, base.Add(time.Duration(sec)*time.Second), s, labels)
			sess.Tenant = tenant
			sess.NodeId = node
			if err := st.Create(ctx, sess, ""); err != nil {
				t.Fatal(err)
			}
		}
		mk("s-1", 1, state.Running, "acme", "n1", map[string]string{"team": "a", "env": "prod"})
		mk("s-2", 2, state.Stopped, "acme", "n1", map[string]string{"team": "a", "env": "dev"})
		mk("s-3", 3, state.Running, "acme", "n2", map[string]string{"team": "b", "env": "prod"})
		mk("s-4", 4, state.Failed, "globex", "n1", map[string]string{"team": "a", "env": "prod"})
		tests := []struct {
			name string
			f    store.Filter
			want []string
		}{
			{"all", store.Filter{}, []string{"s-4", "s-3", "s-2", "s-1"}},
			{"tenant", store.Filter{Tenant: "acme"}, []string{"s-3", "s-2", "s-1"}},
			{"state", store.Filter{States: []sessionv1.SessionState{state.Running}}, []string{"s-3", "s-1"}},
			{"states", store.Filter{States: []sessionv1.SessionState{state.Stopped, state.Failed}}, []string{"s-4", "s-2"}},
			{"one label", store.Filter{Labels: map[string]string{"team": "a"}}, []string{"s-4", "s-2", "s-1"}},
			{"two labels", store.Filter{Labels: map[string]string{"team": "a", "env": "prod"}}, []string{"s-4", "s-1"}},
			{"label and tenant", store.Filter{Tenant: "acme", Labels: map[string]string{"team": "a", "env": "prod"}}, []string{"s-1"}},
			{"label value mismatch", store.Filter{Labels: map[string]string{"team": "c"}}, nil},
			{"node", store.Filter{NodeID: "n1"}, []string{"s-4", "s-2", "s-1"}},
			{"everything", store.Filter{Tenant: "acme", NodeID: "n1", States: []sessionv1.SessionState{state.Running}, Labels: map[string]string{"env": "prod"}}, []string{"s-1"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				// Page one at a time so filters and paging combine.
				f := tt.f
				f.PageSize = 1
				var got []*sessionv1.Session
				for {
					page, next, err := st.List(ctx, f)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, page...)
					if next == "" {
						break
					}
					f.PageToken = next
				}
				equalIDs(t, got, tt.want...)
			})
		}
	}},
	{"BadPageToken", func(t *testing.T, st store.Store) {
		ctx := context.Background()
		for i := range 3 {
			if err := st.Create(ctx, newSession(fmt.Sprint("s-", i), base.Add(time.Duration(i)*time.Second), state.Running, map[string]string{"a": "b"}), ""); err != nil {
				t.Fatal(err)
			}
		}
		_, next, err := st.List(ctx, store.Filter{PageSize: 1, Labels: map[string]string{"a": "b"}})
		if err != nil || next == "" {
			t.Fatalf("first page: next %q, err %v", next, err)
		}
		for _, tok := range []string{"garbage!", "e30", "bm90IGpzb24"} {
			if _, _, err := st.List(ctx, store.Filter{PageToken: tok}); !errors.Is(err, store.ErrInvalidPageToken) {
				t.Errorf("token %q: %v, want ErrInvalidPageToken", tok, err)
			}
		}
		// A token is bound to the filters that made it.
		if _, _, err := st.List(ctx, store.Filter{PageToken: next}); !errors.Is(err, store.ErrInvalidPageToken) {
			t.Errorf("token with other filters: %v, want ErrInvalidPageToken", err)
		}
		if _, _, err := st.List(ctx, store.Filter{PageSize: 1, PageToken: next, Labels: map[string]string{"a": "b"}}); err != nil {
			t.Errorf("token with its filters: %v", err)
		}
	}},
	{"ListExpired", func(t *testing.T, st store.Store) {
		ctx := context.Background()
		now := base.Add(2 * time.Hour)
		mk := func(id string, s sessionv1.SessionState, expire time.Time, lastActive time.Time, idle time.Duration) {
			sess := newSession(id, base, s, nil)
			sess.ExpireTime = timestamppb.New(expire)
			sess.LastActiveTime = timestamppb.New(lastActive)
			sess.IdleTimeout = durationpb.New(idle)
			if err := st.Create(ctx, sess, ""); err != nil {
				t.Fatal(err)
			}
		}
		later := now.Add(time.Hour)
		mk("s-ttl", state.Running, now.Add(-time.Second), now, time.Hour)
		mk("s-ttl-exact", state.Running, now, now, time.Hour)
		mk("s-idle", state.Running, later, now.Add(-time.Hour), 30*time.Minute)
		mk("s-fresh", state.Running, later, now, 30*time.Minute)
		mk("s-no-idle", state.Running, later, now.Add(-100*time.Hour), 0)
		mk("s-suspended-ttl", state.Suspended, now.Add(-time.Second), now, time.Hour)
		mk("s-suspended-idle", state.Suspended, later, now.Add(-time.Hour), time.Minute)
		mk("s-stopped", state.Stopped, now.Add(-time.Hour), now.Add(-time.Hour), time.Minute)
		mk("s-failed", state.Failed, now.Add(-time.Hour), now.Add(-time.Hour), time.Minute)
		mk("s-starting", state.Starting, now.Add(-time.Hour), now.Add(-time.Hour), time.Minute)
		got, err := st.ListExpired(ctx, now, 100)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{"s-ttl": true, "s-ttl-exact": true, "s-idle": true, "s-suspended-ttl": true}
		if len(got) != len(want) {
			t.Fatalf("expired %v, want %v", ids(got), want)
		}
		for _, s := range got {
			if !want[s.GetId()] {
				t.Fatalf("expired %v, want %v", ids(got), want)
			}
		}
		if got, _ := st.ListExpired(ctx, now, 2); len(got) != 2 {
			t.Fatalf("limit 2 returned %d", len(got))
		}
		// Keepalive moves the idle deadline.
		s, _ := st.Get(ctx, "s-idle")
		s.LastActiveTime = timestamppb.New(now)
		s.Generation++
		if err := st.Update(ctx, s, s.Generation-1); err != nil {
			t.Fatal(err)
		}
		got, _ = st.ListExpired(ctx, now, 100)
		for _, s := range got {
			if s.GetId() == "s-idle" {
				t.Fatal("s-idle still expired after its last_active_time moved")
			}
		}
	}},
	{"ListStale", func(t *testing.T, st store.Store) {
		ctx := context.Background()
		mk := func(id string, s sessionv1.SessionState, updated time.Time) {
			sess := newSession(id, base, s, nil)
			sess.UpdateTime = timestamppb.New(updated)
			if err := st.Create(ctx, sess, ""); err != nil {
				t.Fatal(err)
			}
		}
		mk("s-old-starting", state.Starting, base)
		mk("s-new-starting", state.Starting, base.Add(time.Hour))
		mk("s-old-stopping", state.Stopping, base)
		mk("s-old-running", state.Running, base)
		got, err := st.ListStale(ctx, []sessionv1.SessionState{state.Pending, state.Starting, state.Stopping}, base.Add(time.Minute), 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Fatalf("stale %v, want s-old-starting and s-old-stopping", ids(got))
		}
		for _, s := range got {
			if s.GetId() != "s-old-starting" && s.GetId() != "s-old-stopping" {
				t.Fatalf("stale %v", ids(got))
			}
		}
	}},
	{"ListActive", func(t *testing.T, st store.Store) {
		ctx := context.Background()
		n := 0
		mk := func(id string, s sessionv1.SessionState, node string) {
			n++
			sess := newSession(id, base.Add(time.Duration(n)*time.Second), s, nil)
			sess.NodeId = node
			if err := st.Create(ctx, sess, ""); err != nil {
				t.Fatal(err)
			}
		}
		mk("s-1", state.Running, "n1")
		mk("s-2", state.Suspended, "n1")
		mk("s-3", state.Stopped, "n1")
		mk("s-4", state.Lost, "n1")
		mk("s-5", state.Starting, "n1")
		mk("s-6", state.Running, "n2")
		mk("s-7", state.Pending, "")
		got, err := st.ListActive(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		equalIDs(t, got, "s-1", "s-2", "s-5")
		got, err = st.ListActive(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		equalIDs(t, got, "s-1", "s-2", "s-5", "s-6", "s-7")
	}},
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	// A path with characters that mean something in a URI.
	path := filepath.Join(t.TempDir(), "odd ?#% name.db")
	st, err := store.OpenSQLite(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Create(ctx, newSession("s-a", base, state.Running, nil), ""); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// Opening again runs the migrations again, which must be a no-op.
	st, err = store.Open(ctx, "sqlite:"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Get(ctx, "s-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at its path: %v", err)
	}
}

func TestPostgresReplicasMigrateTogether(t *testing.T) {
	ctx := context.Background()
	// Several stores opening one fresh schema at once: the advisory lock
	// keeps their migrations from racing.
	_, dsn := sqlstoretest.Schema(t, "session_test")
	var wg sync.WaitGroup
	stores := make([]store.Store, 3)
	errs := make([]error, 3)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = store.Open(ctx, dsn, nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	if err := stores[0].Create(ctx, newSession("s-a", base, state.Running, nil), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := stores[2].Get(ctx, "s-a"); err != nil {
		t.Fatal(err)
	}
}
