package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/storetest"
	"github.com/deskgrid/deskgrid/services/agent/store"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore/sqlstoretest"
)

func postgresSchema(t testing.TB) string { return storetest.PostgresSchema(t) }

var backends = []struct {
	name string
	open func(t testing.TB) (store.Store, func() store.Store)
}{
	{"memory", func(t testing.TB) (store.Store, func() store.Store) {
		return store.NewMemory(), nil
	}},
	{"sqlite", func(t testing.TB) (store.Store, func() store.Store) {
		path := filepath.Join(t.TempDir(), "agent.db")
		open := func() store.Store {
			st, err := store.OpenSQLite(context.Background(), path, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}
		return open(), open
	}},
	{"postgres", func(t testing.TB) (store.Store, func() store.Store) {
		dsn := postgresSchema(t)
		open := func() store.Store {
			st, err := store.Open(context.Background(), dsn, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}
		return open(), open
	}},
}

func run(id, tenant, session string, at time.Time) *agentv1.Run {
	return &agentv1.Run{
		Id: id, Tenant: tenant, SessionId: session, State: agentv1.RunState_RUN_STATE_QUEUED,
		Provider: "anthropic", Model: "m", Prompt: "p", CreateTime: timestamppb.New(at), UpdateTime: timestamppb.New(at),
		Options: &agentv1.RunOptions{ApprovalTools: []string{"bash"}}, Usage: &agentv1.Usage{},
	}
}

func TestStore(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			st, reopen := be.open(t)
			base := time.Unix(1_700_000_000, 0)
			r1 := run("run-1", "acme", "s-1", base)
			if err := st.Create(ctx, r1, store.Access{BaseURL: "http://proxy", OwnKey: true, SealedKey: []byte{1, 2, 3}}); err != nil {
				t.Fatal(err)
			}
			if err := st.Create(ctx, r1, store.Access{}); !errors.Is(err, store.ErrExists) {
				t.Fatalf("second create: %v", err)
			}
			r1.State = agentv1.RunState_RUN_STATE_SUCCEEDED
			r1.Steps = 4
			r1.UpdateTime = timestamppb.New(base.Add(time.Minute))
			if err := st.Update(ctx, r1); err != nil {
				t.Fatal(err)
			}
			if err := st.Update(ctx, run("nope", "acme", "s-1", base)); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("update of a missing run: %v", err)
			}
			if err := st.SaveConversation(ctx, "run-1", []byte(`[{"role":"user"}]`)); err != nil {
				t.Fatal(err)
			}
			if err := st.SaveConversation(ctx, "nope", []byte(`[]`)); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("conversation of a missing run: %v", err)
			}
			if _, err := st.Get(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("get missing: %v", err)
			}
			if _, err := st.Access(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("access of a missing run: %v", err)
			}

			check := func(st store.Store) {
				t.Helper()
				got, err := st.Get(ctx, "run-1")
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got, r1) {
					t.Fatalf("get = %v, want %v", got, r1)
				}
				conv, err := st.Conversation(ctx, "run-1")
				if err != nil || string(conv) != `[{"role":"user"}]` {
					t.Fatalf("conversation = %s, %v", conv, err)
				}
				a, err := st.Access(ctx, "run-1")
				if err != nil || a.BaseURL != "http://proxy" || !a.OwnKey || string(a.SealedKey) != "\x01\x02\x03" {
					t.Fatalf("access = %+v, %v", a, err)
				}
			}
			check(st)
			if reopen != nil {
				// What was stored survives a restart (and migrating again is a no-op).
				check(reopen())
			}

			// Paging: a tenant's runs on one session, newest first, ties by id.
			for i := range 7 {
				at := base.Add(time.Duration(i/2) * time.Second)
				if err := st.Create(ctx, run(fmt.Sprintf("run-p%d", i), "acme", "s-2", at), store.Access{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Create(ctx, run("run-other", "globex", "s-2", base), store.Access{}); err != nil {
				t.Fatal(err)
			}
			var ids []string
			tok := ""
			for pages := 0; ; pages++ {
				page, next, err := st.List(ctx, "acme", "s-2", 3, tok)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range page {
					ids = append(ids, r.GetId())
				}
				if next == "" {
					break
				}
				if pages > 5 {
					t.Fatal("paging does not end")
				}
				tok = next
			}
			want := []string{"run-p6", "run-p5", "run-p4", "run-p3", "run-p2", "run-p1", "run-p0"}
			if fmt.Sprint(ids) != fmt.Sprint(want) {
				t.Fatalf("listed %v, want %v", ids, want)
			}
			if page, _, err := st.List(ctx, "globex", "s-2", 0, ""); err != nil || len(page) != 1 || page[0].GetId() != "run-other" {
				t.Fatalf("other tenant lists %v, %v", page, err)
			}
			if _, _, err := st.List(ctx, "acme", "s-2", 3, "%%%"); !errors.Is(err, store.ErrInvalidPageToken) {
				t.Fatalf("bad token: %v", err)
			}

			unfinished, err := st.Unfinished(ctx)
			if err != nil || len(unfinished) != 8 {
				t.Fatalf("%d unfinished runs, %v", len(unfinished), err)
			}
			for _, r := range unfinished {
				if r.GetId() == "run-1" {
					t.Fatal("a finished run is listed unfinished")
				}
			}

			// Concurrent updates of different runs all land.
			var wg sync.WaitGroup
			for i := range 7 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := run(fmt.Sprintf("run-p%d", i), "acme", "s-2", base.Add(time.Duration(i/2)*time.Second))
					r.Steps = int32(i + 1)
					if err := st.Update(ctx, r); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			for i := range 7 {
				r, err := st.Get(ctx, fmt.Sprintf("run-p%d", i))
				if err != nil || r.GetSteps() != int32(i+1) {
					t.Fatalf("run-p%d = %v, %v", i, r, err)
				}
			}
		})
	}
}

// The schema lives in tables named for the agent, beside other services'.
func TestSQLTablesArePrefixed(t *testing.T) {
	ctx := context.Background()
	dsn := postgresSchema(t)
	st, err := store.OpenPostgres(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		names = append(names, n)
	}
	if fmt.Sprint(names) != "[agent_goose_version agent_runs]" {
		t.Fatalf("tables = %v", names)
	}
}

// A SQLite path holding '%', '?' and '#' (which mean something in a URI)
// is the file the store keeps its runs in, across a reopen.
func TestSQLiteOddPath(t *testing.T) {
	ctx := context.Background()
	path := sqlstoretest.OddPath(t, "agent.db")
	st, err := store.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Create(ctx, run("r1", "t", "s", time.Unix(100, 0)), store.Access{}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no database at %s: %v", path, err)
	}
	st, err = store.OpenSQLite(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if r, err := st.Get(ctx, "r1"); err != nil || r.GetSessionId() != "s" {
		t.Fatalf("reopened: %v, %v", r, err)
	}
}
