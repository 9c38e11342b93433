package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/history/internal/storetest"
	"github.com/deskgrid/deskgrid/services/history/store"
)

// The search corpus: corpusSize message entries over corpusSessions sessions
// of corpusTenants tenants, each a dozen words drawn (Zipf) from a vocabulary
// of corpusVocab. Built once and kept between runs: a SQLite file under the
// temporary directory and a PostgreSQL schema, both named with
// corpusVersion, which changes whenever the corpus does.
const (
	corpusSize     = 1_000_000
	corpusSessions = 10_000
	corpusTenants  = 100
	corpusVocab    = 20_000
	corpusVersion  = "v2"
	corpusBatch    = 20_000
)

// corpusWord is the i-th word of the vocabulary: pronounceable, distinct,
// and unchanged by stemming (it ends in a vowel and "k").
func corpusWord(i int) string {
	const cons, vows = "bdfglmnprstvz", "aeiou"
	var b strings.Builder
	for n := i + 1; n > 0; n /= len(cons) * len(vows) {
		b.WriteByte(cons[n%len(cons)])
		b.WriteByte(vows[(n/len(cons))%len(vows)])
	}
	b.WriteByte('k')
	return b.String()
}

// corpusEntries calls fn with the corpus in batches.
func corpusEntries(fn func([]store.Entry) error) error {
	r := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, corpusVocab-1)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	batch := make([]store.Entry, 0, corpusBatch)
	words := make([]string, 12)
	for i := range corpusSize {
		for w := range words {
			words[w] = corpusWord(int(zipf.Uint64()))
		}
		// One entry in 10,000 names a rare word: 100 matches in all.
		if i%10_000 == 0 {
			words[0] = "quetzalcoatl"
		}
		session := r.IntN(corpusSessions)
		batch = append(batch, store.Entry{
			ID:        fmt.Sprintf("c%07d", i),
			SessionID: fmt.Sprintf("s%05d", session),
			RunID:     fmt.Sprintf("r%05d", session),
			Sequence:  int64(i + 1),
			Type:      "agent.message.v1",
			Time:      t0.Add(time.Duration(i) * time.Second),
			Tenant:    fmt.Sprintf("t%03d", session%corpusTenants),
			Data:      `{"role":"ROLE_ASSISTANT"}`,
			Text:      strings.Join(words, " "),
		})
		if len(batch) == corpusBatch {
			if err := fn(batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		return fn(batch)
	}
	return nil
}

// corpusComplete reports whether a database holds the whole corpus.
func corpusComplete(ctx context.Context, db *sql.DB) bool {
	var n int
	err := db.QueryRowContext(ctx, "SELECT count(*) FROM history_bench_corpus WHERE version = '"+corpusVersion+"'").Scan(&n)
	return err == nil && n == 1
}

func markComplete(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS history_bench_corpus (version TEXT NOT NULL)"); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, "INSERT INTO history_bench_corpus (version) VALUES ('"+corpusVersion+"')")
	return err
}

// loadCorpus appends the corpus with the full-text index set aside and
// builds that index once at the end, which is several times faster than
// growing it row by row. The index's own definition is read back from the
// database, so the corpus is indexed as the migrations say.
func loadCorpus(ctx context.Context, b *testing.B, s *store.SQL, dialect string) {
	start := time.Now()
	db := s.DB()
	var restore []string
	switch dialect {
	case "sqlite":
		var trigger string
		if err := db.QueryRowContext(ctx, "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'history_entries_text_insert'").Scan(&trigger); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "DROP TRIGGER history_entries_text_insert"); err != nil {
			b.Fatal(err)
		}
		// Every corpus entry has text, so a rebuild indexes what the
		// trigger would have.
		restore = []string{"INSERT INTO history_text (history_text) VALUES ('rebuild')", trigger}
	case "postgres":
		var index string
		if err := db.QueryRowContext(ctx, "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'history_entries_text_tsv'").Scan(&index); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "DROP INDEX history_entries_text_tsv"); err != nil {
			b.Fatal(err)
		}
		restore = []string{"SET maintenance_work_mem = '256MB'", index, "VACUUM ANALYZE history_entries"}
	}
	if err := corpusEntries(func(batch []store.Entry) error {
		_, err := s.Append(ctx, batch)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	loaded := time.Since(start)
	// One connection, so a SET applies to the statements after it.
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	for _, q := range restore {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	if err := markComplete(ctx, db); err != nil {
		b.Fatal(err)
	}
	b.Logf("built the %d-entry corpus in %v (rows %v, full-text index %v)", corpusSize,
		time.Since(start).Round(time.Millisecond), loaded.Round(time.Millisecond), (time.Since(start) - loaded).Round(time.Millisecond))
}

// corpus opens the cached corpus of a database, building it on first use.
var corpus = struct {
	sync.Mutex
	stores map[string]*store.SQL
}{stores: map[string]*store.SQL{}}

func openCorpus(b *testing.B, db string) *store.SQL {
	corpus.Lock()
	defer corpus.Unlock()
	if s, ok := corpus.stores[db]; ok {
		return s
	}
	ctx := context.Background()
	var s *store.SQL
	var err error
	switch db {
	case "sqlite":
		dir := filepath.Join(os.TempDir(), "deskgrid-history-bench")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(dir, "search-"+corpusVersion+".db")
		if s, err = store.OpenSQLite(ctx, path); err != nil {
			b.Fatal(err)
		}
		if !corpusComplete(ctx, s.DB()) {
			// A partial corpus from an interrupted run starts again.
			s.Close()
			for _, suffix := range []string{"", "-wal", "-shm"} {
				os.Remove(path + suffix)
			}
			if s, err = store.OpenSQLite(ctx, path); err != nil {
				b.Fatal(err)
			}
			loadCorpus(ctx, b, s, db)
		}
	case "postgres":
		schema := "history_bench_search_" + corpusVersion
		admin, err := sql.Open("pgx", storetest.PostgresURL())
		if err != nil {
			b.Fatal(err)
		}
		defer admin.Close()
		u, err := url.Parse(storetest.PostgresURL())
		if err != nil {
			b.Fatal(err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		if _, err := admin.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
			b.Fatal(err)
		}
		if s, err = store.OpenPostgres(ctx, u.String()); err != nil {
			b.Fatal(err)
		}
		if !corpusComplete(ctx, s.DB()) {
			s.Close()
			if _, err := admin.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
				b.Fatal(err)
			}
			if s, err = store.OpenPostgres(ctx, u.String()); err != nil {
				b.Fatal(err)
			}
			loadCorpus(ctx, b, s, db)
		}
	}
	corpus.stores[db] = s
	return s
}

// BenchmarkSearch1M searches a 1,000,000-entry history: a word in 100
// entries, one of the most frequent words, two words together, a word of
// middling frequency in one tenant, and a frequent word in one tenant and in
// one session. The corpus is built on the first run
// and kept (see corpusVersion).
func BenchmarkSearch1M(b *testing.B) {
	queries := []struct {
		name string
		q    store.SearchQuery
	}{
		{"rare", store.SearchQuery{Text: "quetzalcoatl"}},
		{"common", store.SearchQuery{Text: corpusWord(2)}},
		{"two_words", store.SearchQuery{Text: corpusWord(5) + " " + corpusWord(40)}},
		{"mid_tenant", store.SearchQuery{Text: corpusWord(300), Tenant: "t007"}},
		{"common_tenant", store.SearchQuery{Text: corpusWord(2), Tenant: "t042"}},
		{"common_session", store.SearchQuery{Text: corpusWord(2), SessionID: "s01234"}},
	}
	for _, db := range []string{"sqlite", "postgres"} {
		b.Run(db, func(b *testing.B) {
			s := openCorpus(b, db)
			ctx := context.Background()
			for _, tc := range queries {
				b.Run(tc.name, func(b *testing.B) {
					hits := 0
					for b.Loop() {
						got, _, err := s.Search(ctx, tc.q)
						if err != nil {
							b.Fatal(err)
						}
						hits = len(got)
					}
					b.ReportMetric(float64(hits), "hits")
					b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/search")
				})
			}
		})
	}
}
