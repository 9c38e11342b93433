package keystore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/metrics/metricstest"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore/sqlstoretest"
)

// reader holds what the package's code recorded.
var reader = metricstest.Global()

// postgresSchema creates a schema for the test, dropped when it ends, and
// returns a DSN whose search_path is that schema.
func postgresSchema(tb testing.TB) string {
	tb.Helper()
	_, dsn := sqlstoretest.Schema(tb, "auth_test")
	return dsn
}

// dialects opens a fresh store per dialect; reopen opens the same database
// again (another replica).
type dialect struct {
	name string
	dsn  func(tb testing.TB) string
}

func dialects() []dialect {
	return []dialect{
		{"sqlite", func(tb testing.TB) string { return filepath.Join(tb.TempDir(), "auth.db") }},
		{"postgres", postgresSchema},
	}
}

func open(tb testing.TB, dsn string) *Store {
	tb.Helper()
	s, err := Open(context.Background(), dsn, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func forEach(t *testing.T, f func(t *testing.T, dsn string)) {
	for _, d := range dialects() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			f(t, d.dsn(t))
		})
	}
}

func TestTenants(t *testing.T) {
	forEach(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		if _, err := s.CreateTenant(ctx, "acme", "Acme Corp"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateTenant(ctx, "acme", "again"); !errors.Is(err, ErrExists) {
			t.Fatalf("duplicate tenant: %v", err)
		}
		for _, bad := range []string{"", "-x", "Acme", "a b", "a/b", "ä", string(make([]byte, 64))} {
			if _, err := s.CreateTenant(ctx, bad, ""); !errors.Is(err, ErrInvalid) {
				t.Errorf("tenant id %q: %v", bad, err)
			}
		}
		if _, err := s.CreateTenant(ctx, "beta", ""); err != nil {
			t.Fatal(err)
		}
		ts, err := s.ListTenants(ctx)
		if err != nil || len(ts) != 2 || ts[0].ID != "acme" || ts[0].Name != "Acme Corp" || ts[1].ID != "beta" || ts[0].CreateTime.IsZero() {
			t.Fatalf("list = %+v, %v", ts, err)
		}
		got, err := s.GetTenant(ctx, "beta")
		if err != nil || got.ID != "beta" {
			t.Fatalf("get = %+v, %v", got, err)
		}
		if _, err := s.GetTenant(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get missing: %v", err)
		}
		if err := s.DeleteTenant(ctx, "nope", false); !errors.Is(err, ErrNotFound) {
			t.Fatalf("delete missing: %v", err)
		}
		if err := s.DeleteTenant(ctx, "beta", false); err != nil {
			t.Fatal(err)
		}
		if ts, _ := s.ListTenants(ctx); len(ts) != 1 {
			t.Fatalf("after delete: %+v", ts)
		}
	})
}

func TestKeysLifecycle(t *testing.T) {
	forEach(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		if _, _, err := s.CreateKey(ctx, "ghost", auth.Scopes{auth.ScopeRead}, "x", time.Time{}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("key for missing tenant: %v", err)
		}
		if _, err := s.CreateTenant(ctx, "acme", ""); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.CreateKey(ctx, "acme", nil, "x", time.Time{}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("no scopes: %v", err)
		}
		if _, _, err := s.CreateKey(ctx, "acme", auth.Scopes{"root"}, "x", time.Time{}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("bad scope: %v", err)
		}
		if _, _, err := s.CreateKey(ctx, "acme", auth.Scopes{auth.ScopeRead}, "x", time.Now().Add(-time.Second)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("past expiry: %v", err)
		}
		exp := time.Now().Add(time.Hour).Round(time.Microsecond)
		k, plain, err := s.CreateKey(ctx, "acme", auth.Scopes{auth.ScopeWrite, auth.ScopeRead, auth.ScopeWrite}, "ci", exp)
		if err != nil {
			t.Fatal(err)
		}
		id, secret, err := auth.ParseKey(plain)
		if err != nil || id != k.ID {
			t.Fatalf("plaintext %q parses to %q, %v (id %q)", plain, id, err, k.ID)
		}
		if k.Scopes.String() != "read,write" || k.Name != "ci" || !k.ExpireTime.Equal(exp) {
			t.Fatalf("key = %+v", k)
		}
		rec, err := s.LookupKey(ctx, k.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !auth.SecretMatches(id, secret, rec.Hash) || rec.Tenant != "acme" || !rec.ExpireTime.Equal(exp) {
			t.Fatalf("record = %+v", rec)
		}
		// The plaintext secret is not anywhere in the stored row.
		for _, b := range [][]byte{rec.Hash} {
			if string(b) == secret {
				t.Fatal("secret stored in clear")
			}
		}
		if _, err := s.LookupKey(ctx, "0000000000000000"); !errors.Is(err, auth.ErrKeyNotFound) {
			t.Fatalf("lookup missing: %v", err)
		}
		used := time.Now().Add(time.Minute)
		if err := s.TouchKey(ctx, k.ID, used); err != nil {
			t.Fatal(err)
		}
		if err := s.TouchKey(ctx, k.ID, used.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetKey(ctx, k.ID)
		if err != nil || !got.LastUsedTime.Equal(used) || !got.Active(time.Now()) {
			t.Fatalf("after touch: %+v, %v", got, err)
		}
		k2, _, err := s.CreateKey(ctx, "acme", auth.Scopes{auth.ScopeRead}, "viewer", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateTenant(ctx, "beta", ""); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.CreateKey(ctx, "beta", auth.Scopes{auth.ScopeAdmin}, "", time.Time{}); err != nil {
			t.Fatal(err)
		}
		ks, err := s.ListKeys(ctx, "acme")
		if err != nil || len(ks) != 2 || ks[0].ID != k.ID || ks[1].ID != k2.ID {
			t.Fatalf("list acme = %+v, %v", ks, err)
		}
		if all, _ := s.ListKeys(ctx, ""); len(all) != 3 {
			t.Fatalf("list all = %d keys", len(all))
		}
		if err := s.DeleteTenant(ctx, "acme", false); !errors.Is(err, ErrTenantHasKeys) {
			t.Fatalf("delete with keys: %v", err)
		}
		if err := s.RevokeKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		first, _ := s.GetKey(ctx, k.ID)
		if first.RevokeTime.IsZero() || first.Active(time.Now()) {
			t.Fatalf("revoked key = %+v", first)
		}
		if err := s.RevokeKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if again, _ := s.GetKey(ctx, k.ID); !again.RevokeTime.Equal(first.RevokeTime) {
			t.Fatal("second revocation moved the time")
		}
		if err := s.RevokeKey(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("revoke missing: %v", err)
		}
		if err := s.DeleteTenant(ctx, "acme", false); !errors.Is(err, ErrTenantHasKeys) {
			t.Fatalf("delete with one active key: %v", err)
		}
		if err := s.RevokeKey(ctx, k2.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteTenant(ctx, "acme", false); err != nil {
			t.Fatalf("delete with only revoked keys: %v", err)
		}
		if ks, _ := s.ListKeys(ctx, "acme"); len(ks) != 0 {
			t.Fatalf("keys left: %+v", ks)
		}
		if err := s.DeleteTenant(ctx, "beta", true); err != nil {
			t.Fatalf("forced delete: %v", err)
		}
		if all, _ := s.ListKeys(ctx, ""); len(all) != 0 {
			t.Fatalf("keys left after force: %+v", all)
		}
	})
}

func TestEnsureFirstKey(t *testing.T) {
	forEach(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		other := open(t, dsn) // a second replica on the same database
		var wg sync.WaitGroup
		keys := make([]string, 4)
		errs := make([]error, 4)
		for i := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := s
				if i%2 == 1 {
					st = other
				}
				keys[i], _, errs[i] = st.EnsureFirstKey(ctx)
			}()
		}
		wg.Wait()
		var plain string
		for i := range keys {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if keys[i] != "" {
				if plain != "" {
					t.Fatal("two replicas each created a first key")
				}
				plain = keys[i]
			}
		}
		if plain == "" {
			t.Fatal("no first key")
		}
		v := auth.NewVerifier(s, auth.VerifierConfig{}, nil)
		p, err := v.Verify(ctx, plain)
		if err != nil || p.Tenant != DefaultTenant || !p.Can(auth.ScopeAdmin) {
			t.Fatalf("first key verifies as %+v, %v", p, err)
		}
		again, created, err := s.EnsureFirstKey(ctx)
		if err != nil || created || again != "" {
			t.Fatalf("second call: %q %v %v", again, created, err)
		}
		// Revoking every key does not mint a new admin key on restart.
		ks, _ := s.ListKeys(ctx, "")
		for _, k := range ks {
			if err := s.RevokeKey(ctx, k.ID); err != nil {
				t.Fatal(err)
			}
		}
		if _, created, _ := open(t, dsn).EnsureFirstKey(ctx); created {
			t.Fatal("a new first key after all keys were revoked")
		}
	})
}

func TestMigrationsIdempotent(t *testing.T) {
	forEach(t, func(t *testing.T, dsn string) {
		open(t, dsn)
		open(t, dsn)
	})
}

// A SQLite path holding '%', '?' and '#' (which mean something in a URI)
// is the file the store keeps its tenants in, across a reopen.
func TestSQLiteOddPath(t *testing.T) {
	ctx := context.Background()
	path := sqlstoretest.OddPath(t, "auth.db")
	s, err := Open(ctx, "sqlite:"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTenant(ctx, "acme", "Acme"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no database at %s: %v", path, err)
	}
	s = open(t, path)
	if got, err := s.GetTenant(ctx, "acme"); err != nil || got.Name != "Acme" {
		t.Fatalf("reopened: %+v, %v", got, err)
	}
}

// queries counts the PostgreSQL queries the store labelled store timed
// with operation and outcome.
func queries(t *testing.T, store, op, outcome string) uint64 {
	t.Helper()
	return metricstest.HistCount(t, reader, "deskgrid.postgres.query.duration",
		attribute.String("store", store), attribute.String("operation", op), attribute.String("outcome", outcome))
}

// The key store's PostgreSQL queries are timed under store="auth": a read
// as a select, a duplicate tenant as an insert refused with a conflict.
func TestPostgresQueriesTimed(t *testing.T) {
	ctx := context.Background()
	s := open(t, postgresSchema(t))
	sel, ins, dup := queries(t, "auth", "select", "ok"), queries(t, "auth", "insert", "ok"), queries(t, "auth", "insert", "conflict")
	if _, err := s.CreateTenant(ctx, "acme", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTenant(ctx, "acme", ""); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate tenant: %v", err)
	}
	if _, err := s.GetTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if d := queries(t, "auth", "insert", "ok") - ins; d != 1 {
		t.Errorf("%d inserts timed, want 1", d)
	}
	if d := queries(t, "auth", "insert", "conflict") - dup; d != 1 {
		t.Errorf("%d conflicting inserts timed, want 1", d)
	}
	if d := queries(t, "auth", "select", "ok") - sel; d != 1 {
		t.Errorf("%d selects timed, want 1", d)
	}
}
