// Package storetest gives tests a PostgreSQL schema of their own.
package storetest

import (
	"testing"

	"github.com/deskgrid/deskgrid/services/platform/sqlstore/sqlstoretest"
)

// PostgresURL is the test server: DESKGRID_TEST_POSTGRES_URL or the local one.
func PostgresURL() string { return sqlstoretest.PostgresURL() }

// PostgresSchema creates a schema for the test, dropped when it ends, and
// returns a DSN whose search_path is that schema.
func PostgresSchema(tb testing.TB) string {
	tb.Helper()
	_, dsn := sqlstoretest.Schema(tb, "agent_test")
	return dsn
}
