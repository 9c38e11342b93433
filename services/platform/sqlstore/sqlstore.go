// Package sqlstore opens the SQL databases deskgrid's stores keep their
// records in: a SQLite file on one machine, PostgreSQL in a cluster. It is
// the one place that knows how: the connection pools, the SQLite pragmas and
// file-URI escaping, the goose migrations under a per-store advisory lock,
// placeholder rebinding, unique-violation and outage detection and the query tracer
// that times every PostgreSQL query (deskgrid_postgres_query_duration_seconds).
//
// A store embeds its migrations as two directories, "sqlite" and
// "postgres", and names its goose version table, so several stores can
// share one database or schema.
package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Config says what a store needs of its database.
type Config struct {
	// Name names the store ("session", "agent", "auth", "history"): in
	// errors, in the migration lock id and as the store label of the query
	// metric.
	Name string
	// Migrations holds the store's goose migrations, in the directories
	// "sqlite" and "postgres".
	Migrations fs.FS
	// VersionTable is goose's bookkeeping table, named for the store.
	VersionTable string
	// Logger, when set, logs the migrations applied.
	Logger *slog.Logger
	// MaxConns caps PostgreSQL connections (16 when 0); a quarter of them,
	// at least 2, stay idle.
	MaxConns int
	// Durable keeps SQLite's synchronous(FULL): a commit survives a power
	// loss, not only a crash of the process. Otherwise synchronous(NORMAL),
	// which in WAL mode can lose the last commits to a power loss but
	// never corrupts the file.
	Durable bool
}

// Migration lock: a replica waits for another's migration up to
// LockRetries * LockRetryPeriod before its open fails.
const (
	LockRetryPeriod = time.Second
	LockRetries     = 300
)

// DB is an open database: W writes (and runs transactions), R reads.
// On SQLite W is one connection, so writers queue in the process instead of
// failing on the file lock, and R is a read-only pool beside it (WAL lets
// readers run while W writes). On PostgreSQL both are the same pool.
type DB struct {
	W, R *sql.DB
	// Schema is the PostgreSQL schema the store's tables are in ("" on SQLite).
	Schema   string
	postgres bool
}

// IsPostgres tells whether the database is PostgreSQL.
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") ||
		strings.Contains(dsn, "dbname=")
}

// Open picks the database from dsn: a postgres:// or postgresql:// URL, or a
// "host=... dbname=..." keyword string, is PostgreSQL (a search_path
// parameter picks the schema); anything else is the path of a SQLite file,
// optionally prefixed with "sqlite:", "sqlite://" or "file:".
func Open(ctx context.Context, dsn string, c Config) (*DB, error) {
	switch {
	case IsPostgres(dsn):
		return OpenPostgres(ctx, dsn, c)
	case strings.HasPrefix(dsn, "sqlite://"):
		return OpenSQLite(ctx, strings.TrimPrefix(dsn, "sqlite://"), c)
	case strings.HasPrefix(dsn, "file:"):
		return OpenSQLite(ctx, strings.TrimPrefix(dsn, "file:"), c)
	default:
		return OpenSQLite(ctx, strings.TrimPrefix(dsn, "sqlite:"), c)
	}
}

// OpenPostgres connects with dsn (a URL or keyword string) and migrates the
// first schema of the search_path. Replicas starting together take an
// advisory lock, one per store and schema, so one migrates and the others
// wait for it; stores and schemas sharing a server never wait on each other.
func OpenPostgres(ctx context.Context, dsn string, c Config) (*DB, error) {
	what := "postgres " + c.Name + " store"
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	cc.Tracer = &tracer{store: c.Name}
	db := stdlib.OpenDB(*cc)
	n := c.MaxConns
	if n <= 0 {
		n = 16
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(max(2, n/4))
	db.SetConnMaxIdleTime(5 * time.Minute)
	var schema string
	if err := db.QueryRowContext(ctx, "SELECT coalesce(current_schema(), '')").Scan(&schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if schema == "" {
		_ = db.Close()
		return nil, fmt.Errorf("%s: no schema on the search_path exists", what)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(LockID(c.Name, schema)),
		lock.WithLockTimeout(uint64(LockRetryPeriod/time.Second), LockRetries))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := migrate(ctx, db, goose.DialectPostgres, "postgres", locker, c); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &DB{W: db, R: db, Schema: schema, postgres: true}, nil
}

// LockID is the PostgreSQL advisory lock that serialises the migrations of
// one store in one schema.
func LockID(store, schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("deskgrid." + store + ".migrate/" + schema))
	return int64(h.Sum64() &^ (1 << 63))
}

// fileURI makes path a SQLite file: URI; '%', '?' and '#' mean something in
// a URI, so they are escaped.
func fileURI(path string) string {
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
}

// OpenSQLite opens (creating it and its directory if needed) the SQLite
// database at path and migrates it.
func OpenSQLite(ctx context.Context, path string, c Config) (*DB, error) {
	what := "sqlite " + c.Name + " store"
	if path == "" {
		return nil, fmt.Errorf("%s: path is required", what)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	q := url.Values{}
	// WAL lets readers run beside the writer; busy_timeout makes another
	// process's writer wait instead of failing.
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	if c.Durable {
		q.Add("_pragma", "synchronous(FULL)")
	} else {
		q.Add("_pragma", "synchronous(NORMAL)")
	}
	wq := url.Values{}
	for k, v := range q {
		wq[k] = v
	}
	// BEGIN IMMEDIATE takes the write lock up front, so a transaction never
	// fails half-way on a lock upgrade.
	wq.Set("_txlock", "immediate")
	uri := fileURI(path)
	w, err := sql.Open("sqlite", uri+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	if err := migrate(ctx, w, goose.DialectSQLite3, "sqlite", nil, c); err != nil {
		_ = w.Close()
		return nil, err
	}
	q.Add("_pragma", "query_only(1)")
	r, err := sql.Open("sqlite", uri+"?"+q.Encode())
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	r.SetMaxOpenConns(4)
	return &DB{W: w, R: r}, nil
}

func migrate(ctx context.Context, db *sql.DB, d goose.Dialect, dir string, locker lock.SessionLocker, c Config) error {
	fsys, err := fs.Sub(c.Migrations, dir)
	if err != nil {
		return fmt.Errorf("%s store migrations: %w", c.Name, err)
	}
	opts := []goose.ProviderOption{goose.WithTableName(c.VersionTable), goose.WithDisableGlobalRegistry(true)}
	if locker != nil {
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	if c.Logger != nil {
		opts = append(opts, goose.WithSlog(c.Logger))
	}
	p, err := goose.NewProvider(d, db, fsys, opts...)
	if err != nil {
		return fmt.Errorf("%s store migrations: %w", c.Name, err)
	}
	// Provider.Close would close db, which the store goes on using.
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate %s store %s schema: %w", c.Name, dir, err)
	}
	return nil
}

// Postgres tells whether the database is PostgreSQL (else SQLite).
func (d *DB) Postgres() bool { return d.postgres }

// Placeholder is the n-th (from 1) parameter marker: $n on PostgreSQL, ?
// on SQLite.
func (d *DB) Placeholder(n int) string {
	if d.postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// Rebind rewrites the ? placeholders of query to $1, $2, ... on
// PostgreSQL. Queries passed to it hold no literal '?'.
func (d *DB) Rebind(query string) string {
	if !d.postgres || !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// Ping checks that the database answers (both pools on SQLite).
func (d *DB) Ping(ctx context.Context) error {
	err := d.W.PingContext(ctx)
	if d.R != d.W {
		err = errors.Join(err, d.R.PingContext(ctx))
	}
	return err
}

// Close closes the pools.
func (d *DB) Close() error {
	err := d.W.Close()
	if d.R != d.W {
		err = errors.Join(err, d.R.Close())
	}
	return err
}

// IsUnreachable reports whether err says the database could not be reached
// or dropped the connection (a network error, a connection pgx could not
// make, one the server closed under a query, one database/sql gave up on),
// rather than refused the request: an outage the caller may retry.
func IsUnreachable(err error) bool {
	var (
		ne net.Error
		ce *pgconn.ConnectError
	)
	return errors.As(err, &ne) || errors.As(err, &ce) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone)
}

// IsUnique reports whether err is a unique or primary-key violation, of
// either database.
func IsUnique(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "23505"
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return true
		}
	}
	return false
}
