package store

import (
	"context"
	"strings"
)

// Open opens the store a DSN names: a postgres:// or postgresql:// URL (or
// a "host=... dbname=..." keyword string) is PostgreSQL; anything else is
// the path of a SQLite file, with an optional "sqlite://" or "file:" prefix.
func Open(ctx context.Context, dsn string) (*SQL, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"),
		strings.Contains(dsn, "dbname="):
		return OpenPostgres(ctx, dsn)
	case strings.HasPrefix(dsn, "sqlite://"):
		return OpenSQLite(ctx, strings.TrimPrefix(dsn, "sqlite://"))
	case strings.HasPrefix(dsn, "file:"):
		return OpenSQLite(ctx, strings.TrimPrefix(dsn, "file:"))
	default:
		return OpenSQLite(ctx, dsn)
	}
}
