package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Open picks the database from dsn: a postgres:// or postgresql:// URL opens
// PostgreSQL; anything else is a SQLite file path, optionally prefixed with
// "sqlite:", "sqlite://" or "file:".
func Open(ctx context.Context, dsn string, logger *slog.Logger) (*SQL, error) {
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

// OpenPostgres connects with dsn (a search_path parameter picks the schema)
// and migrates; replicas starting together take an advisory lock so only
// one migrates.
func OpenPostgres(ctx context.Context, dsn string, logger *slog.Logger) (*SQL, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres agent store: %w", err)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(5 * time.Minute)
	var schema string
	if err := db.QueryRowContext(ctx, "SELECT coalesce(current_schema(), '')").Scan(&schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("postgres agent store: %w", err)
	}
	if schema == "" {
		_ = db.Close()
		return nil, errors.New("postgres agent store: no schema on the search_path exists")
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID(schema)), lock.WithLockTimeout(1, 300))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("postgres agent store: %w", err)
	}
	if err := migrate(ctx, db, goose.DialectPostgres, "postgres", locker, logger); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &SQL{w: db, r: db, postgres: true, isUnique: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23505"
	}}, nil
}

// OpenSQLite opens (creating if needed) the SQLite database at path and
// migrates it. One connection writes, so writers queue in the process
// instead of failing on the file lock; WAL lets readers run beside it.
func OpenSQLite(ctx context.Context, path string, logger *slog.Logger) (*SQL, error) {
	if path == "" {
		return nil, errors.New("sqlite agent store: path is required")
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous(NORMAL)")
	wq := url.Values{}
	for k, v := range q {
		wq[k] = v
	}
	wq.Set("_txlock", "immediate")
	uri := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	w, err := sql.Open("sqlite", uri+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite agent store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := migrate(ctx, w, goose.DialectSQLite3, "sqlite", nil, logger); err != nil {
		_ = w.Close()
		return nil, err
	}
	q.Add("_pragma", "query_only(1)")
	r, err := sql.Open("sqlite", uri+"?"+q.Encode())
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite agent store %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	return &SQL{w: w, r: r, isUnique: func(err error) bool {
		var se *sqlite.Error
		if !errors.As(err, &se) {
			return false
		}
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}}, nil
}
