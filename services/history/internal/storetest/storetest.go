// Package storetest opens history stores for tests: SQLite in a temporary
// directory and PostgreSQL in a schema of its own, both removed at cleanup.
package storetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore/sqlstoretest"
)

// PostgresURL is the test PostgreSQL server: DESKGRID_TEST_POSTGRES_URL, or
// the local server.
func PostgresURL() string { return sqlstoretest.PostgresURL() }

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
	_, dsn := sqlstoretest.Schema(tb, "history_test")
	s, err := store.OpenPostgres(context.Background(), dsn)
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
