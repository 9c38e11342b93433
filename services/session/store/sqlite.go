package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// OpenSQLite opens (creating if needed) the SQLite database at path and
// migrates it. One connection writes, so writers queue in the process instead
// of failing on SQLite's file lock; WAL lets readers run beside it.
func OpenSQLite(ctx context.Context, path string, logger *slog.Logger) (Store, error) {
	if path == "" {
		return nil, errors.New("sqlite store: path is required")
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	wq := url.Values{}
	for k, v := range q {
		wq[k] = v
	}
	// BEGIN IMMEDIATE takes the write lock up front, so a transaction never
	// fails half-way on lock upgrade.
	wq.Set("_txlock", "immediate")

	// The path goes into a file: URI, where these characters mean something.
	uri := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	w, err := sql.Open("sqlite", uri+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	if err := migrate(ctx, w, goose.DialectSQLite3, "sqlite", nil, logger); err != nil {
		_ = w.Close()
		return nil, err
	}
	q.Add("_pragma", "query_only(1)")
	r, err := sql.Open("sqlite", uri+"?"+q.Encode())
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	return &sqlStore{w: w, r: r, d: dialect{name: "sqlite", isUnique: sqliteUnique}}, nil
}

func sqliteUnique(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return false
}
