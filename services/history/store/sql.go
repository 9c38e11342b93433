package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/deskgrid/deskgrid/services/platform/sqlstore"
)

//go:embed migrations
var migrations embed.FS

// migrationTable is goose's version table; named for this service so another
// service migrating the same database keeps its own.
const migrationTable = "history_goose_db_version"

// dialect is what differs between the databases.
type dialect struct {
	name string
	// placeholder returns the n-th (from 1) parameter marker (the
	// database's: sqlstore.DB.Placeholder).
	placeholder func(n int) string
	// timeDest returns a scan destination and how to read the time from it.
	timeDest func() (any, func() time.Time)
	// timeArg is how a time is passed as a parameter.
	timeArg func(time.Time) any
	// insertRows inserts entries in tx, skipping ids already stored, and
	// returns how many it inserted.
	insertRows func(ctx context.Context, tx *sql.Tx, entries []Entry) (int64, error)
	// searchFrom is the FROM clause of a search; its entries table is "e".
	searchFrom string
	// searchMatch is the condition that the text matches the parameter p,
	// and searchPK the expression of the row's pk to order and page by.
	searchMatch func(p string) string
	searchPK    string
	// searchOpts lead a search's arguments: driver options for it.
	searchOpts []any
}

// SQL is a Store over database/sql: w writes, r reads (one pool on
// PostgreSQL; on SQLite one writing connection and a read-only pool).
type SQL struct {
	db   *sqlstore.DB
	w, r *sql.DB
	d    dialect
}

var _ Store = (*SQL)(nil)

func config() sqlstore.Config {
	sub, _ := fs.Sub(migrations, "migrations")
	return sqlstore.Config{Name: "history", Migrations: sub, VersionTable: migrationTable}
}

func wrap(db *sqlstore.DB, err error) (*SQL, error) {
	if err != nil {
		return nil, err
	}
	d := sqliteDialect
	if db.Postgres() {
		d = postgresDialect
	}
	d.placeholder = db.Placeholder
	return &SQL{db: db, w: db.W, r: db.R, d: d}, nil
}

// DB is the database handle that writes.
func (s *SQL) DB() *sql.DB { return s.w }

// Close closes the database.
func (s *SQL) Close() error { return s.db.Close() }

// columns are those inserted; selectColumns those read back.
const (
	columns       = "id, session_id, run_id, sequence, type, kind, time, tenant, data, text, blob_hash"
	selectColumns = "e.pk, e.id, e.session_id, e.run_id, e.sequence, e.type, e.kind, e.time, e.tenant, e.data, e.blob_hash"
)

// Append implements Store.
func (s *SQL) Append(ctx context.Context, entries []Entry) (int, error) {
	return s.append(ctx, entries, nil)
}

// Import implements Store.
func (s *SQL) Import(ctx context.Context, tenant, sessionID string, entries []Entry) (int, error) {
	for i, e := range entries {
		if e.SessionID != sessionID || (tenant != "" && e.Tenant != tenant) {
			return 0, fmt.Errorf("%w: entry %d is not of session %q and tenant %q", ErrInvalidQuery, i, sessionID, tenant)
		}
	}
	if tenant == "" {
		return s.append(ctx, entries, nil)
	}
	return s.append(ctx, entries, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, "SELECT 1 FROM history_entries WHERE session_id = "+s.d.placeholder(1)+" AND tenant != "+s.d.placeholder(2)+" LIMIT 1", sessionID, tenant).Scan(&one)
		switch {
		case err == sql.ErrNoRows:
			return nil
		case err != nil:
			return fmt.Errorf("store: owner of session %s: %w", sessionID, err)
		}
		return fmt.Errorf("%w: session %s", ErrNotFound, sessionID)
	})
}

// append inserts entries in one transaction, after check (when set)
// passes inside it.
func (s *SQL) append(ctx context.Context, entries []Entry, check func(*sql.Tx) error) (int, error) {
	if len(entries) == 0 {
		return 0, nil
	}
	cloned := false
	for i, e := range entries {
		if e.ID == "" || e.SessionID == "" {
			return 0, fmt.Errorf("%w: entry %d has no id or session", ErrInvalidQuery, i)
		}
		if e.Kind == KindUnspecified {
			if !cloned {
				// The caller's slice stays as it was.
				entries, cloned = slices.Clone(entries), true
			}
			entries[i].Kind = KindOf(e.Type)
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("store: begin: %w", err)
	}
	defer tx.Rollback()
	if check != nil {
		if err := check(tx); err != nil {
			return 0, err
		}
	}
	inserted, err := s.d.insertRows(ctx, tx, entries)
	if err != nil {
		return 0, fmt.Errorf("store: insert %d entries: %w", len(entries), err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("store: commit: %w", err)
	}
	return int(inserted), nil
}

func pageSize(n int) int {
	switch {
	case n <= 0:
		return DefaultPageSize
	case n > MaxPageSize:
		return MaxPageSize
	}
	return n
}

// args collects query parameters and hands out their placeholders.
type args struct {
	d    dialect
	vals []any
}

func (a *args) add(v any) string {
	a.vals = append(a.vals, v)
	return a.d.placeholder(len(a.vals))
}

// List implements Store.
func (s *SQL) List(ctx context.Context, q Query) ([]Entry, string, error) {
	if (q.SessionID == "") == (q.RunID == "") {
		return nil, "", fmt.Errorf("%w: exactly one of session id and run id is required", ErrInvalidQuery)
	}
	if q.AfterSequence < 0 {
		return nil, "", fmt.Errorf("%w: after sequence is negative", ErrInvalidQuery)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return nil, "", fmt.Errorf("%w: the end of the time range is not after its start", ErrInvalidQuery)
	}
	size := pageSize(q.PageSize)
	types := normalizeTypes(q.Types)
	kinds := slices.Clone(q.Kinds)
	slices.Sort(kinds)
	kinds = slices.Compact(kinds)
	parts := []string{q.SessionID, q.RunID, q.Tenant, strconv.FormatInt(q.AfterSequence, 10), timeKey(q.Since), timeKey(q.Until)}
	for _, k := range kinds {
		parts = append(parts, "k"+strconv.Itoa(int(k)))
	}
	hash := queryHash(append(parts, types...)...)
	after := q.AfterSequence
	if q.PageToken != "" {
		seq, err := decodeToken(q.PageToken, hash)
		if err != nil {
			return nil, "", err
		}
		after = seq
	}

	a := &args{d: s.d}
	var b strings.Builder
	owner, ownerCol := q.SessionID, "session_id"
	if q.RunID != "" {
		owner, ownerCol = q.RunID, "run_id"
	}
	b.WriteString("SELECT " + selectColumns + " FROM history_entries e WHERE e." + ownerCol + " = " + a.add(owner))
	if q.RunID != "" {
		// Lets the database use the partial index of entries with a run.
		b.WriteString(" AND e.run_id != ''")
	}
	if q.Tenant != "" {
		b.WriteString(" AND e.tenant = " + a.add(q.Tenant))
	}
	b.WriteString(" AND e.sequence > " + a.add(after))
	if len(types) > 0 {
		b.WriteString(" AND e.type IN (")
		for i, t := range types {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(a.add(t))
		}
		b.WriteByte(')')
	}
	if len(kinds) > 0 {
		b.WriteString(" AND e.kind IN (")
		for i, k := range kinds {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(a.add(int64(k)))
		}
		b.WriteByte(')')
	}
	if !q.Since.IsZero() {
		b.WriteString(" AND e.time >= " + a.add(s.d.timeArg(q.Since)))
	}
	if !q.Until.IsZero() {
		b.WriteString(" AND e.time < " + a.add(s.d.timeArg(q.Until)))
	}
	// One more than the page tells whether another page follows.
	b.WriteString(" ORDER BY e.sequence LIMIT " + a.add(size+1))

	out, err := s.query(ctx, b.String(), a.vals, size+1)
	if err != nil {
		return nil, "", fmt.Errorf("store: list: %w", err)
	}
	if len(out) == 0 && q.PageToken == "" {
		// Another tenant's entries count for nothing: their session is as
		// unknown as one without entries.
		exists := "SELECT 1 FROM history_entries WHERE " + ownerCol + " = " + s.d.placeholder(1) + " AND " + ownerCol + " != ''"
		eargs := []any{owner}
		if q.Tenant != "" {
			exists += " AND tenant = " + s.d.placeholder(2)
			eargs = append(eargs, q.Tenant)
		}
		var one int
		err := s.r.QueryRowContext(ctx, exists+" LIMIT 1", eargs...).Scan(&one)
		switch {
		case err == sql.ErrNoRows:
			return nil, "", fmt.Errorf("%w: no entries for %s %q", ErrNotFound, strings.TrimSuffix(ownerCol, "_id"), owner)
		case err != nil:
			return nil, "", fmt.Errorf("store: list: %w", err)
		}
	}
	next := ""
	if len(out) > size {
		out = out[:size]
		next = encodeToken(out[size-1].Sequence, hash)
	}
	return out, next, nil
}

// query runs a select of selectColumns; pks receives each row's pk if set.
func (s *SQL) query(ctx context.Context, query string, args []any, capHint int, pks ...*[]int64) ([]Entry, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]Entry, 0, min(capHint, 256))
	for rows.Next() {
		var e Entry
		var pk int64
		dest, get := s.d.timeDest()
		if err := rows.Scan(&pk, &e.ID, &e.SessionID, &e.RunID, &e.Sequence, &e.Type, &e.Kind, dest, &e.Tenant, &e.Data, &e.BlobHash); err != nil {
			return nil, err
		}
		e.Time = get()
		out = append(out, e)
		if len(pks) > 0 {
			*pks[0] = append(*pks[0], pk)
		}
	}
	return out, rows.Err()
}

func timeKey(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixNano(), 10)
}

// searchWords splits a query into the words both databases index: runs of
// letters and digits. Punctuation and search operators are not passed on,
// so no query is a syntax error.
func searchWords(text string) []string {
	words := strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if len(words) > 32 {
		words = words[:32]
	}
	return words
}

// Search implements Store.
func (s *SQL) Search(ctx context.Context, q SearchQuery) ([]Entry, string, error) {
	words := searchWords(q.Text)
	if len(words) == 0 {
		return nil, "", fmt.Errorf("%w: the search query has no words", ErrInvalidQuery)
	}
	size := pageSize(q.PageSize)
	hash := queryHash(append([]string{q.Tenant, q.SessionID}, words...)...)
	a := &args{d: s.d}
	var b strings.Builder
	b.WriteString("SELECT " + selectColumns + " FROM " + s.d.searchFrom + " WHERE " + s.d.searchMatch(a.add(s.matchText(words, q.Tenant, q.SessionID))))
	if q.Tenant != "" {
		b.WriteString(" AND e.tenant = " + a.add(q.Tenant))
	}
	if q.SessionID != "" {
		b.WriteString(" AND e.session_id = " + a.add(q.SessionID))
	}
	if q.PageToken != "" {
		pk, err := decodeToken(q.PageToken, hash)
		if err != nil {
			return nil, "", err
		}
		b.WriteString(" AND " + s.d.searchPK + " < " + a.add(pk))
	}
	b.WriteString(" ORDER BY " + s.d.searchPK + " DESC LIMIT " + a.add(size+1))
	var pks []int64
	out, err := s.query(ctx, b.String(), append(slices.Clip(s.d.searchOpts), a.vals...), size+1, &pks)
	if err != nil {
		return nil, "", fmt.Errorf("store: search: %w", err)
	}
	next := ""
	if len(out) > size {
		out = out[:size]
		next = encodeToken(pks[size-1], hash)
	}
	return out, next, nil
}

// matchText is the words as the dialect's query: for FTS5, quoted terms,
// which it ANDs, in the text column, and the tenant and session as phrases
// in theirs so that the index narrows to them (the exact comparison is
// still made on the row); for PostgreSQL, plain words for plainto_tsquery,
// which ANDs them too.
func (s *SQL) matchText(words []string, tenant, session string) string {
	if s.d.name != "sqlite" {
		return strings.Join(words, " ")
	}
	var b strings.Builder
	b.WriteString("text : (")
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(`"` + w + `"`)
	}
	b.WriteByte(')')
	for _, f := range []struct{ col, v string }{{"tenant", tenant}, {"session_id", session}} {
		if len(searchWords(f.v)) == 0 {
			continue
		}
		b.WriteString(" AND " + f.col + ` : "` + strings.ReplaceAll(f.v, `"`, `""`) + `"`)
	}
	return b.String()
}

// DeleteSession implements Store.
func (s *SQL) DeleteSession(ctx context.Context, tenant, sessionID string) (int64, error) {
	if sessionID == "" {
		return 0, fmt.Errorf("%w: session id is required", ErrInvalidQuery)
	}
	query, qargs := "DELETE FROM history_entries WHERE session_id = "+s.d.placeholder(1), []any{sessionID}
	if tenant != "" {
		query += " AND tenant = " + s.d.placeholder(2)
		qargs = append(qargs, tenant)
	}
	res, err := s.w.ExecContext(ctx, query, qargs...)
	if err != nil {
		return 0, fmt.Errorf("store: delete session %s: %w", sessionID, err)
	}
	return res.RowsAffected()
}

// Tenants implements Store.
func (s *SQL) Tenants(ctx context.Context) ([]TenantUsage, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT tenant, count(*) FROM history_entries GROUP BY tenant ORDER BY tenant")
	if err != nil {
		return nil, fmt.Errorf("store: tenants: %w", err)
	}
	defer rows.Close()
	var out []TenantUsage
	for rows.Next() {
		var u TenantUsage
		if err := rows.Scan(&u.Tenant, &u.Entries); err != nil {
			return nil, fmt.Errorf("store: tenants: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: tenants: %w", err)
	}
	return out, nil
}

// DeleteBefore implements Store.
func (s *SQL) DeleteBefore(ctx context.Context, tenant string, cutoff time.Time, limit int) (int64, error) {
	p := s.d.placeholder
	res, err := s.w.ExecContext(ctx, "DELETE FROM history_entries WHERE pk IN (SELECT pk FROM history_entries WHERE tenant = "+p(1)+" AND time < "+p(2)+" LIMIT "+p(3)+")",
		tenant, s.d.timeArg(cutoff), max(limit, 1))
	if err != nil {
		return 0, fmt.Errorf("store: delete %s entries before %s: %w", tenant, cutoff.Format(time.RFC3339), err)
	}
	return res.RowsAffected()
}

// DeleteOldest implements Store.
func (s *SQL) DeleteOldest(ctx context.Context, tenant string, keep int64, limit int) (int64, error) {
	p := s.d.placeholder
	res, err := s.w.ExecContext(ctx, "DELETE FROM history_entries WHERE pk IN (SELECT pk FROM history_entries WHERE tenant = "+p(1)+" ORDER BY time DESC, pk DESC LIMIT "+p(2)+" OFFSET "+p(3)+")",
		tenant, max(limit, 1), max(keep, 0))
	if err != nil {
		return 0, fmt.Errorf("store: trim %s to %d entries: %w", tenant, keep, err)
	}
	return res.RowsAffected()
}

// BlobReferenced implements Store.
func (s *SQL) BlobReferenced(ctx context.Context, tenant, hash string) (bool, error) {
	if hash == "" {
		return false, nil
	}
	query, qargs := "SELECT 1 FROM history_entries WHERE blob_hash = "+s.d.placeholder(1)+" AND blob_hash != ''", []any{hash}
	if tenant != "" {
		query += " AND tenant = " + s.d.placeholder(2)
		qargs = append(qargs, tenant)
	}
	var one int
	err := s.r.QueryRowContext(ctx, query+" LIMIT 1", qargs...).Scan(&one)
	switch {
	case err == sql.ErrNoRows:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("store: blob %s: %w", hash, err)
	}
	return true, nil
}
