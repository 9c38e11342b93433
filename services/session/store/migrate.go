package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations
var migrations embed.FS

// versionTable is goose's bookkeeping table, named for this service so other
// services can keep their own migrations in the same database.
const versionTable = "session_goose_version"

// migrate brings the schema up to date.
func migrate(ctx context.Context, db *sql.DB, d goose.Dialect, dir string, locker lock.SessionLocker, logger *slog.Logger) error {
	fsys, err := fs.Sub(migrations, "migrations/"+dir)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	opts := []goose.ProviderOption{goose.WithTableName(versionTable), goose.WithDisableGlobalRegistry(true)}
	if locker != nil {
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	p, err := goose.NewProvider(d, db, fsys, opts...)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	// Provider.Close would close db, which the store still uses.
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate %s schema: %w", dir, err)
	}
	return nil
}

// lockID is the Postgres advisory lock that serialises migrations: the same
// for every replica using one schema, different across schemas so unrelated
// deployments (and tests) sharing a server do not wait on each other.
func lockID(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("deskgrid.session.migrate/" + schema))
	return int64(h.Sum64() &^ (1 << 63))
}
