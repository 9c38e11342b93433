package store

import (
	"context"
	"embed"
	"io/fs"
	"log/slog"

	"github.com/deskgrid/deskgrid/services/platform/sqlstore"
)

//go:embed migrations
var migrations embed.FS

func config(logger *slog.Logger) sqlstore.Config {
	sub, _ := fs.Sub(migrations, "migrations")
	// The version table is named for this service so several services can
	// keep their migrations in one database.
	return sqlstore.Config{Name: "agent", Migrations: sub, VersionTable: "agent_goose_version", Logger: logger}
}

// Open picks the database from dsn: a postgres:// or postgresql:// URL opens
// PostgreSQL; anything else is a SQLite file path, optionally prefixed with
// "sqlite:", "sqlite://" or "file:" (see sqlstore.Open).
func Open(ctx context.Context, dsn string, logger *slog.Logger) (*SQL, error) {
	return wrap(sqlstore.Open(ctx, dsn, config(logger)))
}

// OpenPostgres connects with dsn (a search_path parameter picks the schema)
// and migrates; replicas starting together take an advisory lock so only
// one migrates.
func OpenPostgres(ctx context.Context, dsn string, logger *slog.Logger) (*SQL, error) {
	return wrap(sqlstore.OpenPostgres(ctx, dsn, config(logger)))
}

// OpenSQLite opens (creating if needed) the SQLite database at path and
// migrates it. One connection writes, so writers queue in the process
// instead of failing on the file lock; WAL lets readers run beside it.
func OpenSQLite(ctx context.Context, path string, logger *slog.Logger) (*SQL, error) {
	return wrap(sqlstore.OpenSQLite(ctx, path, config(logger)))
}

func wrap(db *sqlstore.DB, err error) (*SQL, error) {
	if err != nil {
		return nil, err
	}
	return &SQL{db: db, w: db.W, r: db.R, postgres: db.Postgres()}, nil
}
