package store

import (
	"context"
	"database/sql"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/deskgrid/deskgrid/services/platform/sqlstore/sqlstoretest"
)

// migrateTo brings db to version v only, as an older release left it.
func migrateTo(t *testing.T, db *sql.DB, dir string, gd goose.Dialect, v int64) {
	t.Helper()
	fsys, err := fs.Sub(migrations, "migrations/"+dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(gd, db, fsys, goose.WithTableName(migrationTable))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(context.Background(), v); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeKeepsEntries fills a database at the first schema and opens it
// with the current one: the entries are kept and get their kinds, and new
// entries are searchable.
func TestUpgradeKeepsEntries(t *testing.T) {
	ctx := context.Background()
	old := []struct{ id, typ string }{{"e1", "session.state_changed.v1"}, {"e2", "agent.step.v1"}}
	check := func(t *testing.T, s *SQL) {
		got, _, err := s.List(ctx, Query{SessionID: "s1"})
		if err != nil || len(got) != 2 {
			t.Fatalf("after upgrade: %v, %v", got, err)
		}
		if got[0].Kind != KindLifecycle || got[1].Kind != KindOther || got[0].Data != `{"a":1}` {
			t.Fatalf("after upgrade: %+v", got)
		}
		if _, err := s.Append(ctx, []Entry{{ID: "e3", SessionID: "s1", Sequence: 3, Type: "agent.message.v1", Time: time.Now(), Text: "hello there"}}); err != nil {
			t.Fatal(err)
		}
		hits, _, err := s.Search(ctx, SearchQuery{Text: "hello", SessionID: "s1"})
		if err != nil || len(hits) != 1 || hits[0].ID != "e3" {
			t.Fatalf("search after upgrade: %v, %v", hits, err)
		}
	}

	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "h.db")
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		migrateTo(t, db, "sqlite", goose.DialectSQLite3, 1)
		for i, e := range old {
			if _, err := db.Exec("INSERT INTO history_entries (id, session_id, run_id, sequence, type, time, tenant, data) VALUES (?, 's1', '', ?, ?, ?, 'acme', '{\"a\":1}')",
				e.id, i+1, e.typ, time.Now().UnixNano()); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		s, err := OpenSQLite(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, s)
	})

	t.Run("postgres", func(t *testing.T) {
		_, dsn := sqlstoretest.Schema(t, "history_upgrade")
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		migrateTo(t, db, "postgres", goose.DialectPostgres, 1)
		for i, e := range old {
			if _, err := db.Exec("INSERT INTO history_entries (id, session_id, run_id, sequence, type, time, tenant, data) VALUES ($1, 's1', '', $2, $3, now(), 'acme', '{\"a\":1}')",
				e.id, i+1, e.typ); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		s, err := OpenPostgres(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, s)
	})

	t.Run("sqlite text indexed before tenant and session were", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "h.db")
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		migrateTo(t, db, "sqlite", goose.DialectSQLite3, 2)
		if _, err := db.Exec("INSERT INTO history_entries (id, session_id, sequence, type, kind, time, tenant, text) VALUES ('m1', 's1', 1, 'agent.message.v1', 2, 0, 'acme', 'indexed long ago')"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		s, err := OpenSQLite(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		hits, _, err := s.Search(ctx, SearchQuery{Text: "long ago", Tenant: "acme", SessionID: "s1"})
		if err != nil || len(hits) != 1 {
			t.Fatalf("search: %v, %v", hits, err)
		}
		if n, err := s.DeleteSession(ctx, "", "s1"); err != nil || n != 1 {
			t.Fatalf("delete: %d, %v", n, err)
		}
		if hits, _, err := s.Search(ctx, SearchQuery{Text: "long ago"}); err != nil || len(hits) != 0 {
			t.Fatalf("search after delete: %v, %v", hits, err)
		}
		// The index agrees with the table it indexes.
		if _, err := s.DB().Exec("INSERT INTO history_text (history_text, rank) VALUES ('integrity-check', 1)"); err != nil {
			t.Fatalf("full-text index: %v", err)
		}
	})
}
