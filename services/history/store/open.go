package store

import (
	"context"

	"github.com/deskgrid/deskgrid/services/platform/sqlstore"
)

// Open opens the store a DSN names: a postgres:// or postgresql:// URL (or
// a "host=... dbname=..." keyword string) is PostgreSQL; anything else is
// the path of a SQLite file, with an optional "sqlite:", "sqlite://" or
// "file:" prefix (see sqlstore.Open).
func Open(ctx context.Context, dsn string) (*SQL, error) {
	return wrap(sqlstore.Open(ctx, dsn, config()))
}

// OpenPostgres connects to PostgreSQL and brings the schema up to date. The
// migration holds an advisory lock of the history store in that schema, so
// replicas starting together migrate once. Tables go to the first schema of
// the connection's search_path.
func OpenPostgres(ctx context.Context, dsn string) (*SQL, error) {
	return wrap(sqlstore.OpenPostgres(ctx, dsn, config()))
}

// OpenSQLite opens (creating it and its directory if needed) the SQLite
// database at path and brings its schema up to date.
func OpenSQLite(ctx context.Context, path string) (*SQL, error) {
	return wrap(sqlstore.OpenSQLite(ctx, path, config()))
}
