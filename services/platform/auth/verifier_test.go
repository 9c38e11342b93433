package auth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// memSource is a KeySource in memory that counts lookups, so the cache can
// be observed.
type memSource struct {
	mu      sync.Mutex
	keys    map[string]KeyRecord
	lookups int
	touches int
	fail    error
}

func newMemSource() *memSource { return &memSource{keys: map[string]KeyRecord{}} }

func (m *memSource) add(tenant string, scopes Scopes) (string, KeyRecord) {
	plain, id, hash := NewKey()
	rec := KeyRecord{ID: id, Tenant: tenant, Hash: hash, Scopes: scopes}
	m.mu.Lock()
	m.keys[id] = rec
	m.mu.Unlock()
	return plain, rec
}

func (m *memSource) update(id string, f func(*KeyRecord)) {
	m.mu.Lock()
	r := m.keys[id]
	f(&r)
	m.keys[id] = r
	m.mu.Unlock()
}

func (m *memSource) LookupKey(_ context.Context, id string) (KeyRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lookups++
	if m.fail != nil {
		return KeyRecord{}, m.fail
	}
	r, ok := m.keys[id]
	if !ok {
		return KeyRecord{}, fmt.Errorf("key %s: %w", id, ErrKeyNotFound)
	}
	return r, nil
}

func (m *memSource) TouchKey(_ context.Context, id string, t time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touches++
	r := m.keys[id]
	r.LastUsedTime = t
	m.keys[id] = r
	return nil
}

func (m *memSource) counts() (int, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lookups, m.touches
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestVerifyKeys(t *testing.T) {
	ctx := context.Background()
	src := newMemSource()
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	v := NewVerifier(src, VerifierConfig{CacheTTL: -1, Now: clk.now, InternalToken: "node-secret"}, nil)
	good, rec := src.add("acme", Scopes{ScopeWrite})
	revoked, rrec := src.add("acme", Scopes{ScopeRead})
	src.update(rrec.ID, func(r *KeyRecord) { r.RevokeTime = clk.now().Add(-time.Second) })
	expired, erec := src.add("acme", Scopes{ScopeRead})
	src.update(erec.ID, func(r *KeyRecord) { r.ExpireTime = clk.now() })
	unknown, _, _ := NewKey()
	_, id, _ := NewKey()
	wrongSecret := KeyPrefix + rec.ID + good[len(KeyPrefix)+len(id):]
	wrongSecret = wrongSecret[:len(wrongSecret)-2] + "aa"
	if wrongSecret == good {
		wrongSecret = wrongSecret[:len(wrongSecret)-2] + "ba"
	}

	cases := []struct {
		name  string
		token string
		err   error
		want  Principal
	}{
		{"good", good, nil, Principal{Tenant: "acme", KeyID: rec.ID, Scopes: Scopes{ScopeWrite}}},
		{"empty", "", ErrNoCredentials, Principal{}},
		{"garbage", "hello", ErrMalformedKey, Principal{}},
		{"malformed key", "dg_123", ErrMalformedKey, Principal{}},
		{"unknown id", unknown, ErrUnknownKey, Principal{}},
		{"wrong secret", wrongSecret, ErrUnknownKey, Principal{}},
		{"revoked", revoked, ErrRevokedKey, Principal{}},
		{"expired", expired, ErrExpiredKey, Principal{}},
		{"internal token", "node-secret", nil, Principal{KeyID: SystemKeyID, Scopes: Scopes{ScopeAdmin}, System: true}},
		{"internal token prefix", "node-secre", ErrMalformedKey, Principal{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := v.Verify(ctx, c.token)
			if !errors.Is(err, c.err) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if p.Tenant != c.want.Tenant || p.KeyID != c.want.KeyID || p.System != c.want.System || p.Scopes.String() != c.want.Scopes.String() {
				t.Fatalf("principal = %+v, want %+v", p, c.want)
			}
		})
	}

	// No internal token configured: nothing but keys gets in.
	plain := NewVerifier(src, VerifierConfig{}, nil)
	if _, err := plain.Verify(ctx, ""); !errors.Is(err, ErrNoCredentials) {
		t.Fatal(err)
	}
	if _, err := plain.Verify(ctx, "node-secret"); err == nil {
		t.Fatal("internal token accepted without one configured")
	}

	// During a rotation both the new and the old internal token work.
	rot := NewVerifier(src, VerifierConfig{InternalToken: "new-token", OtherInternalTokens: []string{"", "old-token"}}, nil)
	for _, tok := range []string{"new-token", "old-token"} {
		if p, err := rot.Verify(ctx, tok); err != nil || !p.System {
			t.Fatalf("%s: %+v %v", tok, p, err)
		}
	}
	if _, err := rot.Verify(ctx, "node-secret"); err == nil {
		t.Fatal("an unlisted token accepted")
	}

	// A store that cannot answer is not the caller's fault.
	src.fail = errors.New("connection refused")
	if _, err := v.Verify(ctx, good); !errors.Is(err, ErrKeyLookup) {
		t.Fatalf("store down: %v", err)
	}
}

func TestVerifierCacheAndRevocation(t *testing.T) {
	ctx := context.Background()
	src := newMemSource()
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	v := NewVerifier(src, VerifierConfig{CacheTTL: 10 * time.Second, TouchEvery: time.Minute, Now: clk.now}, nil)
	key, rec := src.add("acme", Scopes{ScopeRead})
	for range 5 {
		if _, err := v.Verify(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if l, tch := src.counts(); l != 1 || tch != 1 {
		t.Fatalf("lookups %d touches %d, want 1 and 1", l, tch)
	}
	// Revoked in the store (by another replica): still accepted from the
	// cache until the TTL passes, then refused.
	src.update(rec.ID, func(r *KeyRecord) { r.RevokeTime = clk.now() })
	if _, err := v.Verify(ctx, key); err != nil {
		t.Fatalf("within TTL: %v", err)
	}
	clk.add(10 * time.Second)
	if _, err := v.Verify(ctx, key); !errors.Is(err, ErrRevokedKey) {
		t.Fatalf("after TTL: %v", err)
	}

	// Forget applies a local revocation at once.
	key2, rec2 := src.add("acme", Scopes{ScopeRead})
	if _, err := v.Verify(ctx, key2); err != nil {
		t.Fatal(err)
	}
	src.update(rec2.ID, func(r *KeyRecord) { r.RevokeTime = clk.now() })
	v.Forget(rec2.ID)
	if _, err := v.Verify(ctx, key2); !errors.Is(err, ErrRevokedKey) {
		t.Fatalf("after Forget: %v", err)
	}

	// A cached key with a wrong secret is still refused.
	bad := key2[:len(key2)-2] + "aa"
	if bad != key2 {
		if _, err := v.Verify(ctx, bad); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("wrong secret, cached id: %v", err)
		}
	}

	// Last use is written at most once per TouchEvery.
	key3, _ := src.add("acme", Scopes{ScopeRead})
	_, before := src.counts()
	for range 3 {
		clk.add(11 * time.Second) // past the TTL: every call looks up again
		if _, err := v.Verify(ctx, key3); err != nil {
			t.Fatal(err)
		}
	}
	if _, after := src.counts(); after-before != 1 {
		t.Fatalf("touches = %d, want 1", after-before)
	}
	clk.add(time.Minute)
	if _, err := v.Verify(ctx, key3); err != nil {
		t.Fatal(err)
	}
	if _, after := src.counts(); after-before != 2 {
		t.Fatalf("touches = %d, want 2", after-before)
	}
}

func TestVerifierCacheIsBounded(t *testing.T) {
	ctx := context.Background()
	src := newMemSource()
	v := NewVerifier(src, VerifierConfig{CacheSize: 50}, nil)
	good, _ := src.add("acme", Scopes{ScopeRead})
	for range 1000 {
		k, _, _ := NewKey()
		if _, err := v.Verify(ctx, k); !errors.Is(err, ErrUnknownKey) {
			t.Fatal(err)
		}
		v.mu.Lock()
		n := len(v.cache)
		v.mu.Unlock()
		if n > 50 {
			t.Fatalf("cache grew to %d", n)
		}
	}
	if _, err := v.Verify(ctx, good); err != nil {
		t.Fatal(err)
	}
}

func TestBearerToken(t *testing.T) {
	cases := map[string]string{
		"Bearer abc":   "abc",
		"bearer abc":   "abc",
		"BEARER  abc ": "abc",
		"Basic abc":    "",
		"Bearer":       "",
		"Bearer ":      "",
		"abc":          "",
		"":             "",
	}
	for in, want := range cases {
		got, ok := BearerToken(in)
		if got != want || ok != (want != "") {
			t.Errorf("BearerToken(%q) = %q, %v", in, got, ok)
		}
	}
}

func BenchmarkVerifyCached(b *testing.B) {
	src := newMemSource()
	v := NewVerifier(src, VerifierConfig{}, nil)
	key, _ := src.add("acme", Scopes{ScopeRead})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}
