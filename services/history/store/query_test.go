package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/history/store"
)

func TestKindOf(t *testing.T) {
	tests := []struct {
		typ  string
		want store.Kind
	}{
		{"session.state_changed.v1", store.KindLifecycle},
		{"session.created.v3", store.KindLifecycle},
		{"agent.run_state_changed.v1", store.KindLifecycle},
		{"agent.message.v1", store.KindMessage},
		{"agent.message.v12", store.KindMessage},
		{"agent.message", store.KindMessage},
		{"agent.tool_call.v1", store.KindToolCall},
		{"agent.tool_result.v1", store.KindToolResult},
		{"agent.screenshot.v1", store.KindScreenshot},
		{"agent.usage.v1", store.KindUsage},
		{"trail.perform_actions.v1", store.KindToolCall},
		{"trail.exec.v1", store.KindToolCall},
		{"trail.screenshot.v1", store.KindScreenshot},
		{"agent.messages.v1", store.KindOther},
		{"agent.message.vx", store.KindOther},
		{"agent.step.v1", store.KindOther},
		{"", store.KindOther},
	}
	for _, tc := range tests {
		if got := store.KindOf(tc.typ); got != tc.want {
			t.Errorf("KindOf(%q) = %d; want %d", tc.typ, got, tc.want)
		}
	}
}

// seedRun stores a run of 10 entries of each kind in turn, one a minute, in
// session s1 and run r1, and an entry of run r2 in s2.
func seedRun(t *testing.T, s store.Store) {
	t.Helper()
	types := []string{"agent.message.v1", "agent.tool_call.v1", "agent.tool_result.v1", "agent.screenshot.v1", "agent.usage.v1"}
	var batch []store.Entry
	for i := range 10 {
		batch = append(batch, store.Entry{
			ID: fmt.Sprintf("r1-%d", i), SessionID: "s1", RunID: "r1", Sequence: int64(i + 1),
			Type: types[i%len(types)], Time: base.Add(time.Duration(i) * time.Minute), Tenant: "acme",
		})
	}
	batch = append(batch, store.Entry{ID: "r2-0", SessionID: "s2", RunID: "r2", Sequence: 11, Type: "agent.message.v1", Time: base, Tenant: "other"})
	if _, err := s.Append(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

func TestListKindsTimeAndRuns(t *testing.T) {
	forEachDB(t, func(t *testing.T, s *store.SQL) {
		seedRun(t, s)
		tests := []struct {
			name     string
			q        store.Query
			wantSeqs []int64
		}{
			{"run", store.Query{RunID: "r1"}, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
			{"run paged", store.Query{RunID: "r1", PageSize: 3}, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
			{"other run", store.Query{RunID: "r2"}, []int64{11}},
			{"messages", store.Query{SessionID: "s1", Kinds: []store.Kind{store.KindMessage}}, []int64{1, 6}},
			{"tools", store.Query{RunID: "r1", Kinds: []store.Kind{store.KindToolResult, store.KindToolCall, store.KindToolCall}, PageSize: 1}, []int64{2, 3, 7, 8}},
			{"since", store.Query{SessionID: "s1", Since: base.Add(7 * time.Minute)}, []int64{8, 9, 10}},
			{"until", store.Query{SessionID: "s1", Until: base.Add(2 * time.Minute)}, []int64{1, 2}},
			{"range and kind", store.Query{RunID: "r1", Since: base.Add(time.Minute), Until: base.Add(9 * time.Minute), Kinds: []store.Kind{store.KindUsage}}, []int64{5}},
			{"kind and type", store.Query{RunID: "r1", Kinds: []store.Kind{store.KindMessage}, Types: []string{"agent.usage.v1"}}, nil},
			{"after", store.Query{RunID: "r1", AfterSequence: 8, PageSize: 1}, []int64{9, 10}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				seqs, _ := listAll(t, s, tc.q)
				if fmt.Sprint(seqs) != fmt.Sprint(tc.wantSeqs) {
					t.Fatalf("sequences %v; want %v", seqs, tc.wantSeqs)
				}
			})
		}

		got, _, err := s.List(context.Background(), store.Query{RunID: "r1", PageSize: 4})
		if err != nil {
			t.Fatal(err)
		}
		if got[3].Kind != store.KindScreenshot || got[3].Type != "agent.screenshot.v1" {
			t.Errorf("fourth entry %+v", got[3])
		}

		ctx := context.Background()
		bad := []struct {
			name string
			q    store.Query
			err  error
		}{
			{"no session nor run", store.Query{}, store.ErrInvalidQuery},
			{"session and run", store.Query{SessionID: "s1", RunID: "r1"}, store.ErrInvalidQuery},
			{"empty time range", store.Query{SessionID: "s1", Since: base, Until: base}, store.ErrInvalidQuery},
			{"unknown session", store.Query{SessionID: "nope"}, store.ErrNotFound},
			{"unknown run", store.Query{RunID: "nope"}, store.ErrNotFound},
		}
		for _, tc := range bad {
			if _, _, err := s.List(ctx, tc.q); !errors.Is(err, tc.err) {
				t.Errorf("%s: err = %v; want %v", tc.name, err, tc.err)
			}
		}
		// A token is bound to the time range and kinds it was issued for.
		_, tok, err := s.List(ctx, store.Query{RunID: "r1", PageSize: 2, Kinds: []store.Kind{store.KindMessage, store.KindUsage}})
		if err != nil || tok == "" {
			t.Fatalf("token: %q %v", tok, err)
		}
		if _, _, err := s.List(ctx, store.Query{RunID: "r1", Kinds: []store.Kind{store.KindMessage}, PageToken: tok}); !errors.Is(err, store.ErrInvalidPageToken) {
			t.Errorf("token of other kinds: %v", err)
		}
		if _, _, err := s.List(ctx, store.Query{RunID: "r1", Kinds: []store.Kind{store.KindMessage, store.KindUsage}, Since: base, PageToken: tok}); !errors.Is(err, store.ErrInvalidPageToken) {
			t.Errorf("token of another time range: %v", err)
		}
		if _, _, err := s.List(ctx, store.Query{SessionID: "r1", Kinds: []store.Kind{store.KindMessage, store.KindUsage}, PageToken: tok}); !errors.Is(err, store.ErrInvalidPageToken) {
			t.Errorf("run token used for a session: %v", err)
		}
	})
}

func textEntry(id, session, tenant, text string, seq int64) store.Entry {
	return store.Entry{ID: id, SessionID: session, Sequence: seq, Type: "agent.message.v1", Time: base, Tenant: tenant, Text: text}
}

func searchIDs(t *testing.T, s store.Store, q store.SearchQuery) []string {
	t.Helper()
	var ids []string
	for range 100 {
		got, next, err := s.Search(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			ids = append(ids, e.ID)
		}
		if next == "" {
			return ids
		}
		q.PageToken = next
	}
	t.Fatal("paging does not end")
	return nil
}

func TestSearch(t *testing.T) {
	forEachDB(t, func(t *testing.T, s *store.SQL) {
		ctx := context.Background()
		batch := []store.Entry{
			textEntry("a1", "s1", "acme", "Open the browser and click the Login button", 1),
			textEntry("a2", "s1", "acme", "The login failed: wrong password", 2),
			textEntry("a3", "s2", "acme", "clicking on settings", 3),
			textEntry("b1", "s3", "beta", "login page loaded", 4),
			textEntry("n1", "s1", "acme", "", 5),
			textEntry("u1", "s1", "acme", "Überprüfung der Straße", 6),
			// Ids with punctuation, quotes and words the query also holds.
			textEntry("p1", "sess-1/a", `we"ird`, "login from a strange place", 7),
			textEntry("p2", "sess-1/ab", `we"ird`, "login again", 8),
			textEntry("p3", "login", "ird", "login by name", 9),
		}
		if _, err := s.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			q    store.SearchQuery
			want []string
		}{
			{"one word, newest first", store.SearchQuery{Text: "login"}, []string{"p3", "p2", "p1", "b1", "a2", "a1"}},
			{"session with punctuation", store.SearchQuery{Text: "login", SessionID: "sess-1/a"}, []string{"p1"}},
			{"tenant with a quote", store.SearchQuery{Text: "login", Tenant: `we"ird`}, []string{"p2", "p1"}},
			{"tenant of punctuation only", store.SearchQuery{Text: "login", Tenant: `"`}, nil},
			{"words are not found in ids", store.SearchQuery{Text: "sess"}, nil},
			{"session named like a word", store.SearchQuery{Text: "name", SessionID: "login"}, []string{"p3"}},
			{"case and stemming", store.SearchQuery{Text: "CLICK"}, []string{"a3", "a1"}},
			{"all words", store.SearchQuery{Text: "login button"}, []string{"a1"}},
			{"tenant", store.SearchQuery{Text: "login", Tenant: "acme"}, []string{"a2", "a1"}},
			{"session", store.SearchQuery{Text: "login", SessionID: "s3"}, []string{"b1"}},
			{"tenant and session", store.SearchQuery{Text: "login", Tenant: "beta", SessionID: "s1"}, nil},
			{"paged", store.SearchQuery{Text: "login", PageSize: 1}, []string{"p3", "p2", "p1", "b1", "a2", "a1"}},
			{"punctuation and operators ignored", store.SearchQuery{Text: `"login" (password*) -`}, []string{"a2"}},
			{"no match", store.SearchQuery{Text: "zebra"}, nil},
			{"non-ASCII", store.SearchQuery{Text: "straße"}, []string{"u1"}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if got := searchIDs(t, s, tc.q); fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Fatalf("found %v; want %v", got, tc.want)
				}
			})
		}
		if _, _, err := s.Search(ctx, store.SearchQuery{Text: " ,;- "}); !errors.Is(err, store.ErrInvalidQuery) {
			t.Errorf("no words: %v", err)
		}
		_, tok, err := s.Search(ctx, store.SearchQuery{Text: "login", PageSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Search(ctx, store.SearchQuery{Text: "click", PageToken: tok}); !errors.Is(err, store.ErrInvalidPageToken) {
			t.Errorf("token of another search: %v", err)
		}
		// Deleted entries leave the index.
		if n, err := s.DeleteSession(ctx, "", "s1"); err != nil || n != 4 {
			t.Fatalf("delete s1 = %d, %v", n, err)
		}
		if got := searchIDs(t, s, store.SearchQuery{Text: "login"}); fmt.Sprint(got) != "[p3 p2 p1 b1]" {
			t.Fatalf("after delete: %v", got)
		}
	})
}

func TestDeleteSession(t *testing.T) {
	forEachDB(t, func(t *testing.T, s *store.SQL) {
		ctx := context.Background()
		seed(t, s, 10)
		n, err := s.DeleteSession(ctx, "", "s1")
		if err != nil || n != 10 {
			t.Fatalf("delete = %d, %v; want 10", n, err)
		}
		if _, _, err := s.List(ctx, store.Query{SessionID: "s1"}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("list after delete: %v", err)
		}
		if _, _, err := s.List(ctx, store.Query{SessionID: "s2"}); err != nil {
			t.Errorf("other session: %v", err)
		}
		if n, err := s.DeleteSession(ctx, "", "s1"); err != nil || n != 0 {
			t.Errorf("second delete = %d, %v", n, err)
		}
		if _, err := s.DeleteSession(ctx, "", ""); !errors.Is(err, store.ErrInvalidQuery) {
			t.Errorf("no session: %v", err)
		}
	})
}

func TestRetentionPrimitives(t *testing.T) {
	forEachDB(t, func(t *testing.T, s *store.SQL) {
		ctx := context.Background()
		var batch []store.Entry
		for i := range 20 {
			tenant := "acme"
			if i%2 == 1 {
				tenant = "beta"
			}
			batch = append(batch, store.Entry{
				ID: fmt.Sprint("e", i), SessionID: "s-" + tenant, Sequence: int64(i + 1), Type: "x.v1",
				Time: base.Add(time.Duration(i) * time.Hour), Tenant: tenant, Text: "word",
			})
		}
		if _, err := s.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
		usage, err := s.Tenants(ctx)
		if err != nil || fmt.Sprint(usage) != "[{acme 10} {beta 10}]" {
			t.Fatalf("tenants %v, %v", usage, err)
		}
		// acme's entries are at hours 0,2,...,18: six are before hour 11.
		n, err := s.DeleteBefore(ctx, "acme", base.Add(11*time.Hour), 4)
		if err != nil || n != 4 {
			t.Fatalf("first batch = %d, %v", n, err)
		}
		n, err = s.DeleteBefore(ctx, "acme", base.Add(11*time.Hour), 4)
		if err != nil || n != 2 {
			t.Fatalf("second batch = %d, %v", n, err)
		}
		seqs, _ := listAll(t, s, store.Query{SessionID: "s-acme"})
		if fmt.Sprint(seqs) != "[13 15 17 19]" {
			t.Fatalf("acme keeps %v", seqs)
		}
		// Keep beta's newest three.
		for {
			n, err := s.DeleteOldest(ctx, "beta", 3, 2)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		seqs, _ = listAll(t, s, store.Query{SessionID: "s-beta"})
		if fmt.Sprint(seqs) != "[16 18 20]" {
			t.Fatalf("beta keeps %v", seqs)
		}
		if got := searchIDs(t, s, store.SearchQuery{Text: "word"}); len(got) != 7 {
			t.Fatalf("search finds %d entries after the sweep; want 7", len(got))
		}
	})
}

func TestBlobReferenced(t *testing.T) {
	forEachDB(t, func(t *testing.T, s *store.SQL) {
		ctx := context.Background()
		e := entry("s1", 1, "agent.screenshot.v1")
		e.BlobHash = "abc"
		if _, err := s.Append(ctx, []store.Entry{e, entry("s1", 2, "x.v1")}); err != nil {
			t.Fatal(err)
		}
		for hash, want := range map[string]bool{"abc": true, "abd": false, "": false} {
			got, err := s.BlobReferenced(ctx, "", hash)
			if err != nil || got != want {
				t.Errorf("BlobReferenced(%q) = %v, %v; want %v", hash, got, err, want)
			}
		}
		got, _, err := s.List(ctx, store.Query{SessionID: "s1"})
		if err != nil || got[0].BlobHash != "abc" || got[0].Kind != store.KindScreenshot {
			t.Fatalf("list: %+v, %v", got, err)
		}
	})
}

// A tenant's queries see only its own entries; another tenant's session,
// run or blob is as unknown as one that was never recorded.
func TestTenantScoping(t *testing.T) {
	forEachDB(t, func(t *testing.T, s *store.SQL) {
		ctx := context.Background()
		mine := entry("s1", 1, "agent.screenshot.v1")
		mine.BlobHash = "abc"
		theirs := entry("s1", 2, "agent.message.v1")
		theirs.Tenant = "other"
		other := entry("s2", 3, "agent.screenshot.v1")
		other.Tenant, other.RunID, other.BlobHash = "other", "run-2", "def"
		if _, err := s.Append(ctx, []store.Entry{mine, theirs, other}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			q    store.Query
			want string // ids, or "not found"
		}{
			{store.Query{SessionID: "s1"}, "[s1-1 s1-2]"},
			{store.Query{SessionID: "s1", Tenant: "acme"}, "[s1-1]"},
			{store.Query{SessionID: "s1", Tenant: "other"}, "[s1-2]"},
			{store.Query{SessionID: "s2", Tenant: "acme"}, "not found"},
			{store.Query{SessionID: "nope", Tenant: "acme"}, "not found"},
			{store.Query{RunID: "run-2", Tenant: "acme"}, "not found"},
			{store.Query{RunID: "run-2", Tenant: "other"}, "[s2-3]"},
		} {
			got, _, err := s.List(ctx, tc.q)
			var ids []string
			for _, e := range got {
				ids = append(ids, e.ID)
			}
			res := fmt.Sprint(ids)
			if errors.Is(err, store.ErrNotFound) {
				res = "not found"
			} else if err != nil {
				t.Fatalf("%+v: %v", tc.q, err)
			}
			if res != tc.want {
				t.Errorf("%+v: %s, want %s", tc.q, res, tc.want)
			}
		}
		for _, tc := range []struct {
			tenant, hash string
			want         bool
		}{{"", "abc", true}, {"acme", "abc", true}, {"acme", "def", false}, {"other", "def", true}, {"other", "abc", false}} {
			if got, err := s.BlobReferenced(ctx, tc.tenant, tc.hash); err != nil || got != tc.want {
				t.Errorf("BlobReferenced(%q, %q) = %v, %v; want %v", tc.tenant, tc.hash, got, err, tc.want)
			}
		}
		if n, err := s.DeleteSession(ctx, "acme", "s2"); err != nil || n != 0 {
			t.Fatalf("delete of another tenant's session = %d, %v; want 0", n, err)
		}
		if n, err := s.DeleteSession(ctx, "acme", "s1"); err != nil || n != 1 {
			t.Fatalf("delete = %d, %v; want 1", n, err)
		}
		if got, _, err := s.List(ctx, store.Query{SessionID: "s1", Tenant: "other"}); err != nil || len(got) != 1 {
			t.Fatalf("the other tenant's entries of s1 after acme's delete: %v, %v", got, err)
		}
	})
}
