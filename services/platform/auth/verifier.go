package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Why a request is refused. All of them become Unauthenticated (401);
// ErrKeyLookup becomes Unavailable (503) because the caller may be fine.
var (
	ErrNoCredentials = errors.New("no credentials: send the header \"authorization: Bearer dg_<id>_<secret>\" with an API key")
	ErrUnknownKey    = errors.New("API key not recognised: check it was copied whole, or create a new one with 'deskgrid keys create'")
	ErrRevokedKey    = errors.New("API key was revoked: create a new one with 'deskgrid keys create'")
	ErrExpiredKey    = errors.New("API key has expired: create a new one with 'deskgrid keys create'")
	ErrKeyNotFound   = errors.New("key not found")
	ErrKeyLookup     = errors.New("API keys cannot be checked right now; retry shortly")
)

// KeyRecord is what a Verifier needs to know about a stored key.
type KeyRecord struct {
	ID     string
	Tenant string
	// Hash is HashSecret(id, secret).
	Hash   []byte
	Scopes Scopes
	// Zero times mean never used, never revoked, never expires.
	LastUsedTime time.Time
	RevokeTime   time.Time
	ExpireTime   time.Time
}

// KeySource is where a Verifier looks keys up; keystore.Store is one.
type KeySource interface {
	// LookupKey returns the key with this id, or an error wrapping
	// ErrKeyNotFound.
	LookupKey(ctx context.Context, id string) (KeyRecord, error)
	// TouchKey records that the key was used at t.
	TouchKey(ctx context.Context, id string, t time.Time) error
}

// VerifierConfig tunes a Verifier.
type VerifierConfig struct {
	// CacheTTL bounds how long a looked-up key is trusted without asking the
	// store again, and so how long a revocation takes to reach a replica
	// that did not make it. Default 10s; negative disables the cache.
	CacheTTL time.Duration
	// CacheSize bounds the cached keys (unknown ids included, so a flood of
	// made-up keys cannot grow memory). Default 10000.
	CacheSize int
	// InternalToken, when set, is the shared secret other deskgrid services
	// present to act as the system principal.
	InternalToken string
	// OtherInternalTokens are accepted as well as InternalToken, so the
	// token can rotate without downtime (see docs/security.md).
	OtherInternalTokens []string
	// TouchEvery spaces out last-used writes for one key. Default 1m.
	TouchEvery time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// DefaultVerifierConfig is the configuration the defaults above describe.
func DefaultVerifierConfig() VerifierConfig {
	return VerifierConfig{CacheTTL: 10 * time.Second, CacheSize: 10000, TouchEvery: time.Minute}
}

// Verifier turns a bearer token into a Principal.
type Verifier struct {
	src      KeySource
	cfg      VerifierConfig
	logger   *slog.Logger
	internal [][32]byte // sha256 of each accepted internal token, compared in constant time

	mu    sync.Mutex
	cache map[string]cacheEntry
}

type cacheEntry struct {
	rec     KeyRecord
	found   bool
	fetched time.Time
}

// NewVerifier checks keys against src. src may be nil when only the
// internal token is accepted (a node that serves only the control plane).
func NewVerifier(src KeySource, cfg VerifierConfig, logger *slog.Logger) *Verifier {
	d := DefaultVerifierConfig()
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = d.CacheTTL
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = d.CacheSize
	}
	if cfg.TouchEvery <= 0 {
		cfg.TouchEvery = d.TouchEvery
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if logger == nil {
		logger = slog.Default()
	}
	v := &Verifier{src: src, cfg: cfg, logger: logger, cache: make(map[string]cacheEntry)}
	for _, t := range append([]string{cfg.InternalToken}, cfg.OtherInternalTokens...) {
		if t != "" {
			v.internal = append(v.internal, sha256.Sum256([]byte(t)))
		}
	}
	return v
}

// BearerToken extracts the token from an "Authorization: Bearer <token>"
// value; the scheme is case-insensitive.
func BearerToken(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// Verify authenticates token: an API key or the internal token.
func (v *Verifier) Verify(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, ErrNoCredentials
	}
	if !strings.HasPrefix(token, KeyPrefix) {
		h := sha256.Sum256([]byte(token))
		match := 0
		for _, want := range v.internal {
			match |= subtle.ConstantTimeCompare(h[:], want[:])
		}
		if match == 1 {
			return Principal{KeyID: SystemKeyID, Scopes: Scopes{ScopeAdmin}, System: true}, nil
		}
		return Principal{}, ErrMalformedKey
	}
	id, secret, err := ParseKey(token)
	if err != nil {
		return Principal{}, err
	}
	rec, found, err := v.lookup(ctx, id)
	if err != nil {
		return Principal{}, err
	}
	if !found || !SecretMatches(id, secret, rec.Hash) {
		return Principal{}, ErrUnknownKey
	}
	// Only the true holder learns that the key was revoked or expired.
	now := v.cfg.Now()
	if !rec.RevokeTime.IsZero() && !now.Before(rec.RevokeTime) {
		return Principal{}, ErrRevokedKey
	}
	if !rec.ExpireTime.IsZero() && !now.Before(rec.ExpireTime) {
		return Principal{}, ErrExpiredKey
	}
	v.touch(ctx, rec, now)
	return Principal{Tenant: rec.Tenant, KeyID: rec.ID, Scopes: rec.Scopes}, nil
}

// Forget drops a key from this verifier's cache so a revocation made in
// this process applies at once; other replicas see it within CacheTTL.
func (v *Verifier) Forget(keyID string) {
	v.mu.Lock()
	delete(v.cache, keyID)
	v.mu.Unlock()
}

func (v *Verifier) lookup(ctx context.Context, id string) (KeyRecord, bool, error) {
	now := v.cfg.Now()
	if v.cfg.CacheTTL > 0 {
		v.mu.Lock()
		e, ok := v.cache[id]
		v.mu.Unlock()
		if ok && now.Sub(e.fetched) < v.cfg.CacheTTL && !now.Before(e.fetched) {
			return e.rec, e.found, nil
		}
	}
	if v.src == nil {
		return KeyRecord{}, false, nil
	}
	rec, err := v.src.LookupKey(ctx, id)
	found := err == nil
	if err != nil && !errors.Is(err, ErrKeyNotFound) {
		v.logger.WarnContext(ctx, "API key lookup failed", "key_id", id, "err", err)
		return KeyRecord{}, false, fmt.Errorf("%w: %w", ErrKeyLookup, err)
	}
	if v.cfg.CacheTTL > 0 {
		v.mu.Lock()
		if len(v.cache) >= v.cfg.CacheSize {
			v.evictLocked(now)
		}
		v.cache[id] = cacheEntry{rec: rec, found: found, fetched: now}
		v.mu.Unlock()
	}
	return rec, found, nil
}

// evictLocked makes room: stale entries first, else an arbitrary one (map
// order is random, which is as good as LRU against a flood of made-up ids).
func (v *Verifier) evictLocked(now time.Time) {
	scanned := 0
	for id, e := range v.cache {
		if now.Sub(e.fetched) >= v.cfg.CacheTTL {
			delete(v.cache, id)
		}
		scanned++
		if scanned >= 64 {
			break
		}
	}
	for id := range v.cache {
		if len(v.cache) < v.cfg.CacheSize {
			return
		}
		delete(v.cache, id)
	}
}

// touch records use at most once per TouchEvery per key; a failure only
// costs the last-used time, never the request.
func (v *Verifier) touch(ctx context.Context, rec KeyRecord, now time.Time) {
	if v.src == nil || now.Sub(rec.LastUsedTime) < v.cfg.TouchEvery {
		return
	}
	v.mu.Lock()
	if e, ok := v.cache[rec.ID]; ok {
		e.rec.LastUsedTime = now
		v.cache[rec.ID] = e
	}
	v.mu.Unlock()
	if err := v.src.TouchKey(ctx, rec.ID, now); err != nil {
		v.logger.WarnContext(ctx, "recording API key use failed", "key_id", rec.ID, "err", err)
	}
}
