package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/history/internal/storetest"
	"github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore/sqlstoretest"
)

func forEachDB(t *testing.T, fn func(t *testing.T, s *store.SQL)) {
	for _, o := range storetest.All {
		t.Run(o.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, o.Open(t))
		})
	}
}

var base = time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)

func entry(session string, seq int64, typ string) store.Entry {
	return store.Entry{
		ID:        fmt.Sprintf("%s-%d", session, seq),
		SessionID: session,
		RunID:     "run-1",
		Sequence:  seq,
		Type:      typ,
		Kind:      store.KindOf(typ),
		Time:      base.Add(time.Duration(seq) * time.Second),
		Tenant:    "acme",
		Data:      fmt.Sprintf(`{"n":%d}`, seq),
	}
}

func TestAppendIsIdempotent(t *testing.T) {
	forEachDB(t, func(t *testing.T, s *store.SQL) {
		ctx := context.Background()
		batch := []store.Entry{entry("s1", 1, "a.v1"), entry("s1", 2, "a.v1"), entry("s1", 3, "b.v1")}
		n, err := s.Append(ctx, batch)
		if err != nil || n != 3 {
			t.Fatalf("first append = %d, %v; want 3", n, err)
		}
		// The same batch again, plus one new entry and a duplicate inside the batch.
		again := append(append([]store.Entry{}, batch...), entry("s1", 4, "a.v1"), entry("s1", 4, "a.v1"))
		n, err = s.Append(ctx, again)
		if err != nil || n != 1 {
			t.Fatalf("second append = %d, %v; want 1", n, err)
		}
		got, next, err := s.List(ctx, store.Query{SessionID: "s1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 || next != "" {
			t.Fatalf("got %d entries, next %q; want 4 and no next page", len(got), next)
		}
		want := entry("s1", 1, "a.v1")
		if got[0] != want {
			t.Errorf("round trip:\n got %+v\nwant %+v", got[0], want)
		}
		if n, err := s.Append(ctx, nil); err != nil || n != 0 {
			t.Errorf("empty append = %d, %v", n, err)
		}
	})
}

func TestAppendLargeBatch(t *testing.T) {
	forEachDB(t, func(t *testing.T, s *store.SQL) {
		ctx := context.Background()
		var batch []store.Entry
		for i := range 1234 {
			batch = append(batch, entry("big", int64(i+1), "a.v1"))
		}
		n, err := s.Append(ctx, batch)
		if err != nil || n != len(batch) {
			t.Fatalf("append = %d, %v", n, err)
		}
		got, _, err := s.List(ctx, store.Query{SessionID: "big", AfterSequence: 1200, PageSize: 1000})
		if err != nil || len(got) != 34 {
			t.Fatalf("list = %d, %v; want 34", len(got), err)
		}
	})
}

func TestAppendRefusesEntryWithoutID(t *testing.T) {
	forEachDB(t, func(t *testing.T, s *store.SQL) {
		e := entry("s1", 1, "a.v1")
		e.ID = ""
		if _, err := s.Append(context.Background(), []store.Entry{entry("s1", 2, "a.v1"), e}); err == nil {
			t.Fatal("append without id succeeded")
		}
		got, _, _ := s.List(context.Background(), store.Query{SessionID: "s1"})
		if len(got) != 0 {
			t.Fatalf("a failed batch left %d entries", len(got))
		}
	})
}

// seed stores sessions s1 (seq 1..n, types alternating a/b) and s2 (one entry).
func seed(t *testing.T, s *store.SQL, n int) {
	t.Helper()
	var batch []store.Entry
	for i := 1; i <= n; i++ {
		typ := "a.v1"
		if i%2 == 0 {
			typ = "b.v1"
		}
		// Sequences are the stream's: shared by all sessions, so a session's
		// have gaps.
		batch = append(batch, entry("s1", int64(i*2), typ))
	}
	batch = append(batch, entry("s2", 3, "a.v1"))
	if _, err := s.Append(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

func listAll(t *testing.T, s *store.SQL, q store.Query) (seqs []int64, pages int) {
	t.Helper()
	for {
		got, next, err := s.List(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, e := range got {
			seqs = append(seqs, e.Sequence)
		}
		if next == "" {
			return seqs, pages
		}
		if pages > 1000 {
			t.Fatal("paging does not end")
		}
		q.PageToken = next
	}
}

func TestListPagingAndFilters(t *testing.T) {
	forEachDB(t, func(t *testing.T, s *store.SQL) {
		seed(t, s, 25)
		tests := []struct {
			name      string
			q         store.Query
			wantFirst int64
			wantLast  int64
			wantN     int
			wantPages int
		}{
			{"all in one page", store.Query{SessionID: "s1"}, 2, 50, 25, 1},
			{"pages of 10", store.Query{SessionID: "s1", PageSize: 10}, 2, 50, 25, 3},
			{"exact pages", store.Query{SessionID: "s1", PageSize: 5}, 2, 50, 25, 5},
			{"after", store.Query{SessionID: "s1", AfterSequence: 40, PageSize: 2}, 42, 50, 5, 3},
			{"after all", store.Query{SessionID: "s1", AfterSequence: 50}, 0, 0, 0, 1},
			{"type a", store.Query{SessionID: "s1", Types: []string{"a.v1"}, PageSize: 4}, 2, 50, 13, 4},
			{"type b", store.Query{SessionID: "s1", Types: []string{"b.v1"}}, 4, 48, 12, 1},
			{"both types", store.Query{SessionID: "s1", Types: []string{"b.v1", "a.v1", "a.v1"}, PageSize: 7}, 2, 50, 25, 4},
			{"unknown type", store.Query{SessionID: "s1", Types: []string{"c.v1"}}, 0, 0, 0, 1},
			{"other session", store.Query{SessionID: "s2"}, 3, 3, 1, 1},
			{"oversized page is capped", store.Query{SessionID: "s1", PageSize: 5000}, 2, 50, 25, 1},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				seqs, pages := listAll(t, s, tc.q)
				if len(seqs) != tc.wantN || pages != tc.wantPages {
					t.Fatalf("got %d entries in %d pages; want %d in %d", len(seqs), pages, tc.wantN, tc.wantPages)
				}
				for i := 1; i < len(seqs); i++ {
					if seqs[i] <= seqs[i-1] {
						t.Fatalf("out of order: %v", seqs)
					}
				}
				if tc.wantN > 0 && (seqs[0] != tc.wantFirst || seqs[len(seqs)-1] != tc.wantLast) {
					t.Fatalf("range %d..%d; want %d..%d", seqs[0], seqs[len(seqs)-1], tc.wantFirst, tc.wantLast)
				}
			})
		}
	})
}

func TestListRefusesBadTokens(t *testing.T) {
	forEachDB(t, func(t *testing.T, s *store.SQL) {
		seed(t, s, 10)
		ctx := context.Background()
		_, tok, err := s.List(ctx, store.Query{SessionID: "s1", PageSize: 3, Types: []string{"a.v1", "b.v1"}})
		if err != nil || tok == "" {
			t.Fatalf("first page: %q, %v", tok, err)
		}
		// The same filters in another order, and another page size, accept it.
		if _, _, err := s.List(ctx, store.Query{SessionID: "s1", PageSize: 4, Types: []string{"b.v1", "a.v1"}, PageToken: tok}); err != nil {
			t.Fatalf("same query refused the token: %v", err)
		}
		bad := []struct {
			name string
			q    store.Query
		}{
			{"garbage", store.Query{SessionID: "s1", PageToken: "not a token!"}},
			{"truncated", store.Query{SessionID: "s1", Types: []string{"a.v1", "b.v1"}, PageToken: tok[:len(tok)-2]}},
			{"other session", store.Query{SessionID: "s2", Types: []string{"a.v1", "b.v1"}, PageToken: tok}},
			{"other types", store.Query{SessionID: "s1", Types: []string{"a.v1"}, PageToken: tok}},
			{"no types", store.Query{SessionID: "s1", PageToken: tok}},
			{"other after", store.Query{SessionID: "s1", Types: []string{"a.v1", "b.v1"}, AfterSequence: 1, PageToken: tok}},
		}
		for _, tc := range bad {
			if _, _, err := s.List(ctx, tc.q); !errors.Is(err, store.ErrInvalidPageToken) {
				t.Errorf("%s: err = %v; want ErrInvalidPageToken", tc.name, err)
			}
		}
		if _, _, err := s.List(ctx, store.Query{}); !errors.Is(err, store.ErrInvalidQuery) {
			t.Errorf("no session: err = %v; want ErrInvalidQuery", err)
		}
	})
}

func TestReopenKeepsEntries(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	s, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, []store.Entry{entry("s1", 1, "a.v1")}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _, err := s.List(ctx, store.Query{SessionID: "s1"})
	if err != nil || len(got) != 1 {
		t.Fatalf("after reopen: %d entries, %v", len(got), err)
	}
}

// A SQLite path holding '%', '?' and '#' (which mean something in a URI)
// is the file the store keeps its entries in, across a reopen.
func TestSQLiteOddPath(t *testing.T) {
	ctx := context.Background()
	path := sqlstoretest.OddPath(t, "history.db")
	s, err := store.Open(ctx, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Append(ctx, []store.Entry{{ID: "e1", SessionID: "s1", Sequence: 1, Type: "t", Time: base, Text: "odd path"}}); err != nil || n != 1 {
		t.Fatalf("append: %d, %v", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no database at %s: %v", path, err)
	}
	s = storetest.SQLiteAt(t, path)
	got, _, err := s.List(ctx, store.Query{SessionID: "s1"})
	if err != nil || len(got) != 1 || got[0].ID != "e1" {
		t.Fatalf("reopened: %v, %v", got, err)
	}
	if hits, _, err := s.Search(ctx, store.SearchQuery{Text: "odd"}); err != nil || len(hits) != 1 {
		t.Fatalf("search: %v, %v", hits, err)
	}
}
