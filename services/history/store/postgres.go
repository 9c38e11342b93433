package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"
)

var postgresDialect = dialect{
	name: "postgres",
	timeDest: func() (any, func() time.Time) {
		var t time.Time
		return &t, func() time.Time { return t.UTC() }
	},
	timeArg:    func(t time.Time) any { return t.UTC() },
	insertRows: postgresInsert,
	searchFrom: "history_entries e",
	// The text condition lets PostgreSQL use the partial GIN index.
	searchMatch: func(p string) string { return "e.text != '' AND e.text_tsv @@ plainto_tsquery('english', " + p + ")" },
	searchPK:    "e.pk",
	// The best plan depends on the values: how common the words are, how
	// selective the tenant or session. A cached generic plan, which a
	// prepared statement falls back to after a few runs, can be a hundred
	// times slower, so each search is planned with its own values.
	searchOpts: []any{pgx.QueryExecModeDescribeExec},
}

// postgresInsert sends a chunk as one array per column: one statement of
// eleven parameters whatever the chunk size, which PostgreSQL parses and plans
// once instead of a VALUES list of thousands of parameters.
func postgresInsert(ctx context.Context, tx *sql.Tx, chunk []Entry) (int64, error) {
	ids := make([]string, len(chunk))
	sessions := make([]string, len(chunk))
	runs := make([]string, len(chunk))
	seqs := make([]int64, len(chunk))
	types := make([]string, len(chunk))
	times := make([]time.Time, len(chunk))
	tenants := make([]string, len(chunk))
	data := make([]string, len(chunk))
	kinds := make([]int16, len(chunk))
	texts := make([]string, len(chunk))
	blobs := make([]string, len(chunk))
	for i, e := range chunk {
		ids[i], sessions[i], runs[i], seqs[i] = e.ID, e.SessionID, e.RunID, e.Sequence
		types[i], times[i], tenants[i], data[i] = e.Type, e.Time.UTC(), e.Tenant, e.Data
		kinds[i], texts[i], blobs[i] = int16(e.Kind), e.Text, e.BlobHash
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO history_entries (`+columns+`)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::smallint[], $7::timestamptz[], $8::text[], $9::text[], $10::text[], $11::text[])
		ON CONFLICT (id) DO NOTHING`,
		ids, sessions, runs, seqs, types, kinds, times, tenants, data, texts, blobs)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
