package store

import (
	"context"
	"database/sql"
	"time"
)

var sqliteDialect = dialect{
	name: "sqlite",
	timeDest: func() (any, func() time.Time) {
		var ns int64
		return &ns, func() time.Time { return time.Unix(0, ns).UTC() }
	},
	timeArg:     func(t time.Time) any { return t.UnixNano() },
	insertRows:  sqliteInsert,
	searchFrom:  "history_text JOIN history_entries e ON e.pk = history_text.rowid",
	searchMatch: func(p string) string { return "history_text MATCH " + p },
	// FTS5 walks its matches in rowid order, so newest first stops early.
	searchPK: "history_text.rowid",
}

// sqliteInsert runs one prepared statement per entry: SQLite runs in
// process, so a row costs no round trip, and it skips parsing a statement of
// thousands of parameters.
func sqliteInsert(ctx context.Context, tx *sql.Tx, chunk []Entry) (int64, error) {
	st, err := tx.PrepareContext(ctx, "INSERT INTO history_entries ("+columns+") VALUES (?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO NOTHING")
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var n int64
	for _, e := range chunk {
		res, err := st.ExecContext(ctx, e.ID, e.SessionID, e.RunID, e.Sequence, e.Type, int64(e.Kind), e.Time.UnixNano(), e.Tenant, e.Data, e.Text, e.BlobHash)
		if err != nil {
			return 0, err
		}
		k, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}
