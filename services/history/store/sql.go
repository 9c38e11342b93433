package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
)

//go:embed migrations
var migrations embed.FS

// migrationTable is goose's version table; named for this service so another
// service migrating the same database keeps its own.
const migrationTable = "history_goose_db_version"

// dialect is what differs between the databases.
type dialect struct {
	name string
	// placeholder returns the n-th (from 1) parameter marker.
	placeholder func(n int) string
	// timeDest returns a scan destination and how to read the time from it.
	timeDest func() (any, func() time.Time)
	// insertRows inserts entries in tx, skipping ids already stored, and
	// returns how many it inserted.
	insertRows func(ctx context.Context, tx *sql.Tx, entries []Entry) (int64, error)
}

// SQL is a Store over database/sql.
type SQL struct {
	db *sql.DB
	d  dialect
}

var _ Store = (*SQL)(nil)

func open(ctx context.Context, db *sql.DB, d dialect, gooseDialect goose.Dialect, opts ...goose.ProviderOption) (*SQL, error) {
	if err := migrate(ctx, db, d.name, gooseDialect, opts...); err != nil {
		db.Close()
		return nil, err
	}
	return &SQL{db: db, d: d}, nil
}

func migrate(ctx context.Context, db *sql.DB, dir string, gd goose.Dialect, opts ...goose.ProviderOption) error {
	fsys, err := fs.Sub(migrations, "migrations/"+dir)
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
	}
	opts = append([]goose.ProviderOption{goose.WithTableName(migrationTable)}, opts...)
	p, err := goose.NewProvider(gd, db, fsys, opts...)
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("store: migrate %s: %w", dir, err)
	}
	return nil
}

// DB is the underlying database handle.
func (s *SQL) DB() *sql.DB { return s.db }

// Close closes the database.
func (s *SQL) Close() error { return s.db.Close() }

const columns = "id, session_id, run_id, sequence, type, time, tenant, data"

// Append implements Store.
func (s *SQL) Append(ctx context.Context, entries []Entry) (int, error) {
	if len(entries) == 0 {
		return 0, nil
	}
	for i, e := range entries {
		if e.ID == "" || e.SessionID == "" {
			return 0, fmt.Errorf("%w: entry %d has no id or session", ErrInvalidQuery, i)
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("store: begin: %w", err)
	}
	defer tx.Rollback()
	inserted, err := s.d.insertRows(ctx, tx, entries)
	if err != nil {
		return 0, fmt.Errorf("store: insert %d entries: %w", len(entries), err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("store: commit: %w", err)
	}
	return int(inserted), nil
}

// List implements Store.
func (s *SQL) List(ctx context.Context, q Query) ([]Entry, string, error) {
	if q.SessionID == "" {
		return nil, "", fmt.Errorf("%w: session id is required", ErrInvalidQuery)
	}
	if q.AfterSequence < 0 {
		return nil, "", fmt.Errorf("%w: after sequence is negative", ErrInvalidQuery)
	}
	size := q.PageSize
	switch {
	case size <= 0:
		size = DefaultPageSize
	case size > MaxPageSize:
		size = MaxPageSize
	}
	types := normalizeTypes(q.Types)
	hash := queryHash(q.SessionID, types, q.AfterSequence)
	after := q.AfterSequence
	if q.PageToken != "" {
		seq, err := decodeToken(q.PageToken, hash)
		if err != nil {
			return nil, "", err
		}
		after = seq
	}

	var b strings.Builder
	args := []any{q.SessionID, after}
	b.WriteString("SELECT " + columns + " FROM history_entries WHERE session_id = " + s.d.placeholder(1) + " AND sequence > " + s.d.placeholder(2))
	if len(types) > 0 {
		b.WriteString(" AND type IN (")
		for i, t := range types {
			if i > 0 {
				b.WriteByte(',')
			}
			args = append(args, t)
			b.WriteString(s.d.placeholder(len(args)))
		}
		b.WriteByte(')')
	}
	// One more than the page tells whether another page follows.
	args = append(args, size+1)
	b.WriteString(" ORDER BY sequence LIMIT " + s.d.placeholder(len(args)))

	rows, err := s.db.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, "", fmt.Errorf("store: list: %w", err)
	}
	defer rows.Close()
	out := make([]Entry, 0, min(size+1, 256))
	for rows.Next() {
		var e Entry
		dest, get := s.d.timeDest()
		if err := rows.Scan(&e.ID, &e.SessionID, &e.RunID, &e.Sequence, &e.Type, dest, &e.Tenant, &e.Data); err != nil {
			return nil, "", fmt.Errorf("store: list: %w", err)
		}
		e.Time = get()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("store: list: %w", err)
	}
	next := ""
	if len(out) > size {
		out = out[:size]
		next = encodeToken(out[size-1].Sequence, hash)
	}
	return out, next, nil
}

func questionMark(int) string { return "?" }

func dollar(n int) string { return "$" + strconv.Itoa(n) }
