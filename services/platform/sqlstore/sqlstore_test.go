package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deskgrid/deskgrid/services/platform/metrics/metricstest"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore/sqlstoretest"
)

var (
	reader = sdkmetric.NewManualReader()
	spans  = tracetest.NewSpanRecorder()
)

func TestMain(m *testing.M) {
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	os.Exit(m.Run())
}

// migrations create a table and put one row in it: run twice, the second
// run fails (the table exists) or the table holds two rows.
var migrations = fstest.MapFS{
	"sqlite/00001_things.sql": {Data: []byte(`-- +goose Up
CREATE TABLE things (id TEXT PRIMARY KEY, n INTEGER NOT NULL);
-- +goose Down
DROP TABLE things;
`)},
	"sqlite/00002_seed.sql": {Data: []byte(`-- +goose Up
CREATE TABLE seeded (at INTEGER NOT NULL);
INSERT INTO seeded (at) VALUES (2);
-- +goose Down
DROP TABLE seeded;
`)},
	"postgres/00001_things.sql": {Data: []byte(`-- +goose Up
CREATE TABLE things (id TEXT PRIMARY KEY, n BIGINT NOT NULL);
-- +goose Down
DROP TABLE things;
`)},
	"postgres/00002_seed.sql": {Data: []byte(`-- +goose Up
CREATE TABLE seeded (at BIGINT NOT NULL);
INSERT INTO seeded (at) SELECT 2 FROM pg_sleep(0.2);
-- +goose Down
DROP TABLE seeded;
`)},
}

func config(name string) sqlstore.Config {
	return sqlstore.Config{Name: name, Migrations: migrations, VersionTable: name + "_goose_version"}
}

func open(t *testing.T, dsn string, c sqlstore.Config) *sqlstore.DB {
	t.Helper()
	db, err := sqlstore.Open(context.Background(), dsn, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

func count(t *testing.T, db *sqlstore.DB, table string) int {
	t.Helper()
	var n int
	if err := db.R.QueryRowContext(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A SQLite path with characters that mean something in a URI ('%', '?',
// '#') opens the file at that very path, created with its directory, and
// reopens it with its rows.
func TestSQLiteOddPath(t *testing.T) {
	ctx := context.Background()
	path := sqlstoretest.OddPath(t, "store.db")
	for _, dsn := range []string{path, "sqlite://" + path, "file:" + path} {
		db, err := sqlstore.Open(ctx, dsn, config("odd"))
		if err != nil {
			t.Fatalf("open %s: %v", dsn, err)
		}
		if _, err := db.W.ExecContext(ctx, "INSERT INTO things (id, n) VALUES (?, 1)", dsn); err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no database at the path asked for: %v", err)
	}
	entries, err := os.ReadDir(filepath.Dir(filepath.Dir(path)))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(filepath.Dir(path)) {
		t.Fatalf("files beside the database's directory: %v", entries)
	}
	db := open(t, path, config("odd"))
	if n := count(t, db, "things"); n != 3 {
		t.Fatalf("%d rows after three opens of the same file, want 3", n)
	}
	if n := count(t, db, "seeded"); n != 1 {
		t.Fatalf("seed ran %d times", n)
	}
}

// SQLite's read pool refuses writes; the writer's commits are visible to it.
func TestSQLiteReadPoolRefusesWrites(t *testing.T) {
	ctx := context.Background()
	db := open(t, filepath.Join(t.TempDir(), "store.db"), config("ro"))
	if db.R == db.W || db.Postgres() {
		t.Fatal("SQLite has one pool")
	}
	if _, err := db.R.ExecContext(ctx, "INSERT INTO things (id, n) VALUES ('r', 1)"); err == nil {
		t.Fatal("the read pool wrote")
	}
	if _, err := db.R.ExecContext(ctx, "CREATE TABLE more (x INTEGER)"); err == nil {
		t.Fatal("the read pool changed the schema")
	}
	if _, err := db.W.ExecContext(ctx, "INSERT INTO things (id, n) VALUES ('w', 1)"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "things"); n != 1 {
		t.Fatalf("the read pool sees %d rows, want the writer's 1", n)
	}
	if err := db.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// Unique violations are told apart from other errors on both databases.
func TestIsUnique(t *testing.T) {
	ctx := context.Background()
	_, pg := sqlstoretest.Schema(t, "sqlstore_test")
	for name, dsn := range map[string]string{"sqlite": filepath.Join(t.TempDir(), "u.db"), "postgres": pg} {
		t.Run(name, func(t *testing.T) {
			db := open(t, dsn, config("unique"))
			ins := db.Rebind("INSERT INTO things (id, n) VALUES (?, ?)")
			if _, err := db.W.ExecContext(ctx, ins, "a", 1); err != nil {
				t.Fatal(err)
			}
			_, err := db.W.ExecContext(ctx, ins, "a", 2)
			if err == nil || !sqlstore.IsUnique(err) {
				t.Fatalf("duplicate key: %v, IsUnique false", err)
			}
			_, err = db.W.ExecContext(ctx, ins, "b", nil)
			if err == nil || sqlstore.IsUnique(err) {
				t.Fatalf("null in a NOT NULL column: %v, IsUnique %v", err, sqlstore.IsUnique(err))
			}
			if sqlstore.IsUnique(errors.New("duplicate key")) {
				t.Fatal("IsUnique on an error of no database")
			}
		})
	}
}

func TestRebind(t *testing.T) {
	for _, c := range []struct {
		pg       bool
		in, want string
	}{
		{true, "SELECT a FROM t WHERE b = ? AND c IN (?, ?)", "SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)"},
		{false, "SELECT a FROM t WHERE b = ?", "SELECT a FROM t WHERE b = ?"},
		{true, "SELECT 1", "SELECT 1"},
	} {
		if got := sqlstore.NewTestDB(c.pg).Rebind(c.in); got != c.want {
			t.Errorf("Rebind(%q) postgres=%v = %q, want %q", c.in, c.pg, got, c.want)
		}
	}
}

// Replicas opening one schema at once migrate it once: every open succeeds
// and each migration ran a single time.
func TestPostgresConcurrentMigrations(t *testing.T) {
	schema, dsn := sqlstoretest.Schema(t, "sqlstore_test")
	const replicas = 6
	var wg sync.WaitGroup
	errs := make(chan error, replicas)
	dbs := make(chan *sqlstore.DB, replicas)
	for range replicas {
		wg.Go(func() {
			db, err := sqlstore.OpenPostgres(context.Background(), dsn, config("alpha"))
			if err != nil {
				errs <- err
				return
			}
			dbs <- db
		})
	}
	wg.Wait()
	close(errs)
	close(dbs)
	for err := range errs {
		t.Errorf("concurrent open: %v", err)
	}
	var db *sqlstore.DB
	for d := range dbs {
		if d.Schema != schema {
			t.Errorf("schema %q, want %q", d.Schema, schema)
		}
		db = d
		t.Cleanup(func() { _ = d.Close() })
	}
	if t.Failed() {
		t.FailNow()
	}
	var rows, versions int
	if err := db.R.QueryRow("SELECT count(*), count(DISTINCT version_id) FROM alpha_goose_version").Scan(&rows, &versions); err != nil {
		t.Fatal(err)
	}
	if rows != versions || versions != 3 {
		t.Errorf("goose versions: %d rows for %d versions, want 3 (0, 1, 2) once each", rows, versions)
	}
	if n := count(t, db, "seeded"); n != 1 {
		t.Errorf("the seed migration ran %d times", n)
	}
}

// The migration lock is one store's in one schema: while it is held, that
// store's open waits for it, and another store's open in the same schema
// does not.
func TestPostgresMigrationLockPerStore(t *testing.T) {
	ctx := context.Background()
	schema, dsn := sqlstoretest.Schema(t, "sqlstore_test")
	holder, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	conn, err := holder.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", sqlstore.LockID("alpha", schema)); err != nil {
		t.Fatal(err)
	}
	other := fstest.MapFS{}
	for name, f := range migrations {
		other[name] = &fstest.MapFile{Data: []byte(strings.NewReplacer("things", "beta_things", "seeded", "beta_seeded").Replace(string(f.Data)))}
	}
	beta := config("beta")
	beta.Migrations = other
	open(t, dsn, beta)

	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if db, err := sqlstore.OpenPostgres(short, dsn, config("alpha")); err == nil {
		db.Close()
		t.Fatal("alpha migrated while another replica held its lock")
	}
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", sqlstore.LockID("alpha", schema)); err != nil {
		t.Fatal(err)
	}
	db := open(t, dsn, config("alpha"))
	if n := count(t, db, "seeded"); n != 1 {
		t.Fatalf("seeded: %d rows", n)
	}
}

// histCount adds the observation counts of histogram name's points whose
// attributes include want.
func histCount(t *testing.T, name string, want ...attribute.KeyValue) uint64 {
	t.Helper()
	return metricstest.HistCount(t, reader, name, want...)
}

// Every PostgreSQL query is timed by store, operation and outcome, and is
// a client span under the caller's.
func TestPostgresQueryMetricAndSpan(t *testing.T) {
	ctx := context.Background()
	_, dsn := sqlstoretest.Schema(t, "sqlstore_test")
	db := open(t, dsn, config("traced"))
	const name = "deskgrid.postgres.query.duration"
	kv := func(store, op, outcome string) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("store", store), attribute.String("operation", op), attribute.String("outcome", outcome)}
	}
	insOK, insConflict := histCount(t, name, kv("traced", "insert", "ok")...), histCount(t, name, kv("traced", "insert", "conflict")...)
	selOK, selErr := histCount(t, name, kv("traced", "select", "ok")...), histCount(t, name, kv("traced", "select", "error")...)

	ctx, parent := otel.Tracer("test").Start(ctx, "caller")
	for range 2 {
		_, _ = db.W.ExecContext(ctx, "INSERT INTO things (id, n) VALUES ($1, 1)", "same")
	}
	var n int
	if err := db.R.QueryRowContext(ctx, "SELECT n FROM things WHERE id = $1", "same").Scan(&n); err != nil || n != 1 {
		t.Fatalf("select: %d, %v", n, err)
	}
	if _, err := db.R.ExecContext(ctx, "SELECT * FROM no_such_table"); err == nil {
		t.Fatal("a select of no table worked")
	}
	parent.End()

	for _, c := range []struct {
		attrs       []attribute.KeyValue
		before, add uint64
	}{
		{kv("traced", "insert", "ok"), insOK, 1},
		{kv("traced", "insert", "conflict"), insConflict, 1},
		{kv("traced", "select", "ok"), selOK, 1},
		{kv("traced", "select", "error"), selErr, 1},
	} {
		if got := histCount(t, name, c.attrs...); got != c.before+c.add {
			t.Errorf("%v: %d queries timed, want %d", c.attrs, got-c.before, c.add)
		}
	}

	var children []string
	for _, s := range spans.Ended() {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() {
			children = append(children, s.Name())
			var store string
			for _, a := range s.Attributes() {
				if a.Key == "deskgrid.store" {
					store = a.Value.AsString()
				}
			}
			if store != "traced" {
				t.Errorf("span %s: store %q", s.Name(), store)
			}
		}
	}
	if strings.Join(children, ",") != "postgres insert,postgres insert,postgres select,postgres select" {
		t.Errorf("spans under the caller's: %v", children)
	}
}

func TestOperation(t *testing.T) {
	for sql, want := range map[string]string{
		"SELECT 1":                             "select",
		"  insert INTO t VALUES ($1)":          "insert",
		"-- note\nUPDATE t SET a = 1":          "update",
		"/* x */ DELETE FROM t":                "delete",
		"(SELECT 1) UNION (SELECT 2)":          "select",
		"WITH x AS (SELECT 1) SELECT * FROM x": "with",
		"begin":                                "begin",
		"VACUUM t":                             "other",
		"SELECT/* x */1":                       "select",
		"":                                     "other",
		"-- unterminated":                      "other",
	} {
		if got := sqlstore.Operation(sql); got != want {
			t.Errorf("Operation(%q) = %q, want %q", sql, got, want)
		}
	}
}

// A database that cannot be reached is an outage; one that answers with an
// error (a unique violation, a bad query, no rows) is not.
func TestIsUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/test?sslmode=disable&connect_timeout=5")
	if err == nil {
		_ = conn.Close(ctx)
		t.Skip("the closed port answered")
	}
	if !sqlstore.IsUnreachable(err) {
		t.Fatalf("connect to a closed port: %v (%T) is not an outage", err, err)
	}
	if !sqlstore.IsUnreachable(fmt.Errorf("get x: %w", sql.ErrConnDone)) {
		t.Fatal("sql.ErrConnDone is not an outage")
	}

	_, pg := sqlstoretest.Schema(t, "sqlstore_test")
	for name, dsn := range map[string]string{"sqlite": filepath.Join(t.TempDir(), "r.db"), "postgres": pg} {
		db := open(t, dsn, config("reach"))
		for _, q := range []string{"SELECT * FROM no_such_table", "SELECT id FROM things WHERE 1 = 0"} {
			var id any
			err := db.R.QueryRowContext(ctx, q).Scan(&id)
			if err == nil || sqlstore.IsUnreachable(err) {
				t.Fatalf("%s: %s: %v counted as an outage", name, q, err)
			}
		}
	}
}
