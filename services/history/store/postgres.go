package store

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

var postgresDialect = dialect{
	name:        "postgres",
	placeholder: dollar,
	timeArg:     func(t time.Time) any { return t.UTC() },
	timeDest: func() (any, func() time.Time) {
		var t time.Time
		return &t, func() time.Time { return t.UTC() }
	},
}

// OpenPostgres connects to PostgreSQL and brings the schema up to date. The
// migration holds an advisory lock, so replicas starting together migrate
// once. Tables go to the first schema of the connection's search_path.
func OpenPostgres(ctx context.Context, dsn string) (*SQL, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open postgres: %w", err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open postgres: %w", err)
	}
	h := fnv.New64a()
	h.Write([]byte("deskgrid.history.migrations"))
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(h.Sum64() >> 1)))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: migration lock: %w", err)
	}
	return open(ctx, db, postgresDialect, goose.DialectPostgres, goose.WithSessionLocker(locker))
}
