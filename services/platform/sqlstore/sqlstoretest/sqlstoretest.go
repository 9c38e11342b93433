// Package sqlstoretest gives tests a throwaway PostgreSQL schema on the test
// server, and a SQLite path whose characters mean something in a URI.
package sqlstoretest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// PostgresURL is the test PostgreSQL server: DESKGRID_TEST_POSTGRES_URL, or
// the local one.
func PostgresURL() string {
	if u := os.Getenv("DESKGRID_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Schema creates a schema named prefix_<random> for the test, dropped with
// everything in it when the test ends (after the cleanups the test
// registers later, such as closing its store), and returns its name and a
// DSN whose search_path is that schema.
func Schema(tb testing.TB, prefix string) (name, dsn string) {
	tb.Helper()
	admin, err := sql.Open("pgx", PostgresURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	name = prefix + "_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(context.Background(), "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("postgres at %s (set DESKGRID_TEST_POSTGRES_URL): %v", PostgresURL(), err)
	}
	tb.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name, WithSearchPath(tb, PostgresURL(), name)
}

// WithSearchPath returns dsn (a URL) with its search_path set to schema.
func WithSearchPath(tb testing.TB, dsn, schema string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// OddPath is the path of a database file, not created, in a new directory
// under tb.TempDir() whose name holds '%', '?', '#' and a space: characters
// that mean something in the file: URI SQLite is opened with.
func OddPath(tb testing.TB, file string) string {
	tb.Helper()
	return filepath.Join(tb.TempDir(), "a%41 b?mode=ro#frag", file)
}
