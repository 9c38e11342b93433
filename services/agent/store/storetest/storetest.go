// Package storetest gives tests a PostgreSQL schema of their own.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// PostgresURL is the test server: DESKGRID_TEST_POSTGRES_URL or the local one.
func PostgresURL() string {
	if u := os.Getenv("DESKGRID_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// PostgresSchema creates a schema for the test, dropped when it ends, and
// returns a DSN whose search_path is that schema.
func PostgresSchema(tb testing.TB) string {
	tb.Helper()
	admin, err := sql.Open("pgx", PostgresURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "agent_test_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		tb.Fatalf("postgres at %s: %v", PostgresURL(), err)
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
	return u.String()
}
