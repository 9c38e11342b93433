package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// OpenPostgres connects to PostgreSQL with dsn (a URL or key=value string;
// a search_path parameter picks the schema) and migrates it. Replicas
// starting together take an advisory lock so only one migrates.
func OpenPostgres(ctx context.Context, dsn string, logger *slog.Logger) (Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(5 * time.Minute)
	var schema string
	if err := db.QueryRowContext(ctx, "SELECT coalesce(current_schema(), '')").Scan(&schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	if schema == "" {
		_ = db.Close()
		return nil, errors.New("postgres store: no schema on the search_path exists")
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID(schema)), lock.WithLockTimeout(1, 300))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	if err := migrate(ctx, db, goose.DialectPostgres, "postgres", locker, logger); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &sqlStore{w: db, r: db, d: dialect{name: "postgres", dollar: true, isUnique: pgUnique}}, nil
}

func pgUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
