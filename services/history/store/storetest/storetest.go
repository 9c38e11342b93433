// Package storetest opens history stores for tests: SQLite in a temporary
// directory and PostgreSQL in a schema of its own, both removed at cleanup.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/deskgrid/deskgrid/services/history/store"
)

// PostgresURL is the test PostgreSQL server: DESKGRID_TEST_POSTGRES_URL, or
// the local server.
func PostgresURL() string {
	if u := os.Getenv("DESKGRID_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Opener opens a fresh, empty store for one test.
type Opener struct {
	Name string
	Open func(tb testing.TB) *store.SQL
}

// All are the databases a store suite runs against.
var All = []Opener{{"sqlite", SQLite}, {"postgres", Postgres}}

// SQLite opens a store in a new file under tb.TempDir().
func SQLite(tb testing.TB) *store.SQL {
	tb.Helper()
	return SQLiteAt(tb, filepath.Join(tb.TempDir(), "history.db"))
}

// SQLiteAt opens the store at path and closes it at cleanup.
func SQLiteAt(tb testing.TB, path string) *store.SQL {
	tb.Helper()
	s, err := store.OpenSQLite(context.Background(), path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Postgres opens a store in a new schema, dropped at cleanup.
func Postgres(tb testing.TB) *store.SQL {
	tb.Helper()
	ctx := context.Background()
	admin, err := sql.Open("pgx", PostgresURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "history_test_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatalf("postgres at %s (set DESKGRID_TEST_POSTGRES_URL): %v", PostgresURL(), err)
	}
	tb.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(PostgresURL())
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	s, err := store.OpenPostgres(ctx, u.String())
	if err != nil {
		tb.Fatal(err)
	}
	// Cleanups run last-in first-out: the store closes before the drop.
	tb.Cleanup(func() { s.Close() })
	return s
}

// Count returns how many entries the store holds and how many distinct ids.
func Count(tb testing.TB, s *store.SQL) (rows, distinct int) {
	tb.Helper()
	err := s.DB().QueryRowContext(context.Background(), "SELECT count(*), count(DISTINCT id) FROM history_entries").Scan(&rows, &distinct)
	if err != nil {
		tb.Fatal(err)
	}
	return rows, distinct
}
