package viewer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

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

func key(id string) SigningKey {
	return SigningKey{ID: id, Secret: bytes.Repeat([]byte(id[:1]), 32)}
}

func newIssuer(t testing.TB, clk *clock, keys ...SigningKey) *Issuer {
	t.Helper()
	i, err := New(Config{Keys: keys, Now: clk.now}, NewMemoryWithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func TestIssueAndVerify(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	iss := newIssuer(t, clk, key("k1"))
	tok, c, err := iss.IssueViewerToken("s-1", "acme", ModeControl, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "dgv1.") || len(tok) > 200 {
		t.Fatalf("token %q", tok)
	}
	got, err := iss.VerifyViewerToken(ctx, tok, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	if got != c || got.Mode != ModeControl || got.Tenant != "acme" || got.SessionID != "s-1" || !got.Expiry.Equal(clk.now().Add(5*time.Minute)) || len(got.TokenID) != 32 {
		t.Fatalf("claims %+v, issued %+v", got, c)
	}

	cases := []struct {
		name    string
		token   string
		session string
		err     error
	}{
		{"other session", tok, "s-2", ErrWrongSession},
		{"empty", "", "s-1", ErrMalformed},
		{"no prefix", strings.TrimPrefix(tok, "dgv1."), "s-1", ErrMalformed},
		{"no mac", tok[:strings.LastIndexByte(tok, '.')], "s-1", ErrMalformed},
		{"short mac", tok[:len(tok)-2], "s-1", ErrMalformed},
		{"padded", tok + "=", "s-1", ErrMalformed},
		{"huge", "dgv1." + strings.Repeat("A", 5000) + ".x", "s-1", ErrMalformed},
	}
	for _, c := range cases {
		if _, err := iss.VerifyViewerToken(ctx, c.token, c.session); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}

	// Flipping any bit of the payload breaks the signature (or the form).
	p64, m64, _ := strings.Cut(strings.TrimPrefix(tok, "dgv1."), ".")
	payload, _ := base64.RawURLEncoding.DecodeString(p64)
	for i := range payload {
		for bit := range 8 {
			p := bytes.Clone(payload)
			p[i] ^= 1 << bit
			forged := "dgv1." + base64.RawURLEncoding.EncodeToString(p) + "." + m64
			if _, err := iss.VerifyViewerToken(ctx, forged, "s-1"); err == nil {
				t.Fatalf("byte %d bit %d flipped: accepted", i, bit)
			}
		}
	}
	// The view-only version of a control token cannot be made without the key.
	p := bytes.Clone(payload)
	p[1] = 1
	if _, err := iss.VerifyViewerToken(ctx, "dgv1."+base64.RawURLEncoding.EncodeToString(p)+"."+m64, "s-1"); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("downgraded mode: %v", err)
	}

	// Another deployment's key does not verify.
	other := newIssuer(t, clk, SigningKey{ID: "k1", Secret: bytes.Repeat([]byte("x"), 32)})
	if _, err := other.VerifyViewerToken(ctx, tok, "s-1"); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("foreign key: %v", err)
	}

	// Expiry.
	clk.add(5*time.Minute - time.Second)
	if _, err := iss.VerifyViewerToken(ctx, tok, "s-1"); err != nil {
		t.Fatalf("just before expiry: %v", err)
	}
	clk.add(time.Second)
	if _, err := iss.VerifyViewerToken(ctx, tok, "s-1"); !errors.Is(err, ErrExpired) {
		t.Fatalf("at expiry: %v", err)
	}
}

func TestTTLAndArguments(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	iss := newIssuer(t, clk, key("k1"))
	_, c, err := iss.IssueViewerToken("s-1", "", ModeView, 48*time.Hour)
	if err != nil || !c.Expiry.Equal(clk.now().Add(time.Hour)) {
		t.Fatalf("capped ttl: %+v %v", c, err)
	}
	for _, bad := range []struct {
		session string
		mode    Mode
	}{{"", ModeView}, {"s", "admin"}, {"s", ""}, {strings.Repeat("s", 256), ModeView}} {
		if _, _, err := iss.IssueViewerToken(bad.session, "t", bad.mode, 0); err == nil {
			t.Errorf("issued for %q %q", bad.session, bad.mode)
		}
	}
	for _, cfg := range []Config{
		{},
		{Keys: []SigningKey{{ID: "k", Secret: make([]byte, 31)}}},
		{Keys: []SigningKey{{ID: "", Secret: make([]byte, 32)}}},
		{Keys: []SigningKey{key("k1"), key("k1")}},
	} {
		if _, err := New(cfg, NewMemory()); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	// Revocations are never silently per process: the caller chooses.
	if _, err := New(Config{Keys: []SigningKey{key("k1")}}, nil); err == nil {
		t.Error("New without a revocation store accepted")
	}
}

func TestKeyRotation(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	old := newIssuer(t, clk, key("k1"))
	oldTok, _, _ := old.IssueViewerToken("s-1", "acme", ModeView, 0)
	// Rotated: k2 signs, k1 still verifies.
	rotated := newIssuer(t, clk, key("k2"), key("k1"))
	newTok, c, _ := rotated.IssueViewerToken("s-1", "acme", ModeView, 0)
	if c.KeyID != "k2" {
		t.Fatalf("signed with %q", c.KeyID)
	}
	for _, tok := range []string{oldTok, newTok} {
		if _, err := rotated.VerifyViewerToken(ctx, tok, "s-1"); err != nil {
			t.Fatalf("during rotation: %v", err)
		}
	}
	// k1 retired: its tokens stop.
	done := newIssuer(t, clk, key("k2"))
	if _, err := done.VerifyViewerToken(ctx, oldTok, "s-1"); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("retired key: %v", err)
	}
	if _, err := done.VerifyViewerToken(ctx, newTok, "s-1"); err != nil {
		t.Fatal(err)
	}
}

func TestRevocationMemory(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	mem := NewMemoryWithClock(clk.now)
	iss, err := New(Config{Keys: []SigningKey{key("k1")}, Now: clk.now}, mem)
	if err != nil {
		t.Fatal(err)
	}
	tok, c, _ := iss.IssueViewerToken("s-1", "acme", ModeView, time.Minute)
	keep, _, _ := iss.IssueViewerToken("s-1", "acme", ModeView, time.Minute)
	if err := iss.RevokeViewerToken(ctx, c.TokenID, c.Expiry); err != nil {
		t.Fatal(err)
	}
	if _, err := iss.VerifyViewerToken(ctx, tok, "s-1"); !errors.Is(err, ErrRevoked) {
		t.Fatalf("revoked: %v", err)
	}
	if _, err := iss.VerifyViewerToken(ctx, keep, "s-1"); err != nil {
		t.Fatalf("other token: %v", err)
	}
	// Expired revocations are swept, so the set stays bounded.
	for range 1000 {
		_, c, _ := iss.IssueViewerToken("s-1", "acme", ModeView, time.Minute)
		if err := iss.RevokeViewerToken(ctx, c.TokenID, c.Expiry); err != nil {
			t.Fatal(err)
		}
		clk.add(time.Second)
	}
	if n := mem.Len(); n > 200 {
		t.Fatalf("revocation set holds %d entries", n)
	}
}

func redisClient(t *testing.T) *redis.Client {
	u := os.Getenv("DESKGRID_TEST_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestRevocationRedis(t *testing.T) {
	ctx := context.Background()
	rdb := redisClient(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "dgtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	// Two gateway replicas sharing Redis.
	cfg := Config{Keys: []SigningKey{key("k1")}}
	a, err := New(cfg, NewRedis(rdb, prefix))
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := New(cfg, NewRedis(rdb, prefix))
	tok, c, _ := a.IssueViewerToken("s-1", "acme", ModeControl, time.Minute)
	if _, err := b2.VerifyViewerToken(ctx, tok, "s-1"); err != nil {
		t.Fatal(err)
	}
	if err := a.RevokeViewerToken(ctx, c.TokenID, c.Expiry); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.VerifyViewerToken(ctx, tok, "s-1"); !errors.Is(err, ErrRevoked) {
		t.Fatalf("revoked on another replica: %v", err)
	}
	ttl, err := rdb.PTTL(ctx, prefix+"viewer:revoked:"+c.TokenID).Result()
	if err != nil || ttl <= 0 || ttl > time.Minute+time.Second {
		t.Fatalf("revocation ttl %v %v", ttl, err)
	}
	// Revoking an already-expired token stores nothing.
	if err := a.RevokeViewerToken(ctx, "00", time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, prefix+"viewer:revoked:00").Result(); n != 0 {
		t.Fatal("stored an expired revocation")
	}
}

func FuzzParseViewerToken(f *testing.F) {
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	iss := newIssuer(f, clk, key("k1"))
	tok, _, _ := iss.IssueViewerToken("s-1", "acme", ModeControl, 0)
	f.Add(tok)
	f.Add("dgv1..")
	f.Add("dgv1.AQ.")
	f.Add(tok[:len(tok)-5])
	f.Fuzz(func(t *testing.T, s string) {
		c, err := iss.ParseViewerToken(s)
		if err != nil {
			return
		}
		// Anything accepted is a token this issuer signed: it must
		// re-encode to the very same payload.
		var tid [tokenIDBytes]byte
		raw, _ := hex.DecodeString(c.TokenID)
		copy(tid[:], raw)
		p64, _, _ := strings.Cut(strings.TrimPrefix(s, tokenPrefix), ".")
		payload, _ := base64.RawURLEncoding.DecodeString(p64)
		if !bytes.Equal(encode(c, tid), payload) {
			t.Fatalf("accepted %q with claims %+v that do not re-encode", s, c)
		}
	})
}

func BenchmarkVerifyViewerToken(b *testing.B) {
	iss, _ := New(Config{Keys: []SigningKey{key("k1")}}, NewMemory())
	tok, _, _ := iss.IssueViewerToken("s-1", "acme", ModeView, 0)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := iss.VerifyViewerToken(ctx, tok, "s-1"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestKeysFromConfig(t *testing.T) {
	a, b := NewSigningKey("a"), NewSigningKey("b")
	keys, err := ParseKeys("a:" + base64.StdEncoding.EncodeToString(a.Secret) + ",b:" + hex.EncodeToString(b.Secret))
	if err != nil || len(keys) != 2 || keys[0].ID != "a" || !bytes.Equal(keys[1].Secret, b.Secret) {
		t.Fatalf("ParseKeys = %+v, %v", keys, err)
	}
	if _, err := ParseKeys("a:short"); err == nil {
		t.Fatal("short key accepted")
	}
	iss, err := New(Config{Keys: keys}, NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	tok, _, _ := iss.IssueViewerToken("s", "t", ModeView, 0)
	if _, err := iss.VerifyViewerToken(context.Background(), tok, "s"); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyRequest(t *testing.T) {
	ctx := context.Background()
	iss, _ := New(Config{Keys: []SigningKey{NewSigningKey("k")}}, NewMemory())
	tok, _, _ := iss.IssueViewerToken("s-1", "acme", ModeView, 0)
	inQuery, _ := http.NewRequest("GET", "http://gw/v1/sessions/s-1/vnc?token="+tok, nil)
	inHeader, _ := http.NewRequest("GET", "http://gw/v1/sessions/s-1/vnc", nil)
	inHeader.Header.Set("Authorization", "Bearer "+tok)
	apiKey, _ := http.NewRequest("GET", "http://gw/v1/sessions/s-1/vnc", nil)
	apiKey.Header.Set("Authorization", "Bearer dg_0123456789abcdef_"+strings.Repeat("a", 52))
	none, _ := http.NewRequest("GET", "http://gw/v1/sessions/s-1/vnc", nil)
	for _, r := range []*http.Request{inQuery, inHeader} {
		if c, err := iss.VerifyRequest(ctx, r, "s-1"); err != nil || c.Mode != ModeView {
			t.Fatalf("%s: %+v %v", r.URL, c, err)
		}
	}
	// An API key is not a viewer token: the VNC endpoint takes nothing else.
	for _, r := range []*http.Request{apiKey, none} {
		if _, err := iss.VerifyRequest(ctx, r, "s-1"); !errors.Is(err, ErrMissing) {
			t.Fatalf("%v", err)
		}
	}
	if _, err := iss.VerifyRequest(ctx, inQuery, "s-2"); !errors.Is(err, ErrWrongSession) {
		t.Fatal(err)
	}
}
