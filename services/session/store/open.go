package store

import (
	"context"
	"log/slog"
	"strings"
)

// Open picks the database from dsn: a postgres:// or postgresql:// URL opens
// PostgreSQL; anything else is a SQLite file path, optionally prefixed with
// "sqlite:", "sqlite://" or "file:".
func Open(ctx context.Context, dsn string, logger *slog.Logger) (Store, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return OpenPostgres(ctx, dsn, logger)
	case strings.HasPrefix(dsn, "sqlite://"):
		return OpenSQLite(ctx, strings.TrimPrefix(dsn, "sqlite://"), logger)
	case strings.HasPrefix(dsn, "file:"):
		return OpenSQLite(ctx, strings.TrimPrefix(dsn, "file:"), logger)
	default:
		return OpenSQLite(ctx, strings.TrimPrefix(dsn, "sqlite:"), logger)
	}
}
