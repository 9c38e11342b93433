// Package viewer issues and checks viewer tokens: short-lived signed links
// to one session's live view, view-only or with control. A token is
// "dgv1.<payload>.<mac>" (base64url): the payload names the signing key,
// session, tenant, mode, expiry and a token id; the mac is HMAC-SHA256 over
// it. Signing keys rotate: tokens verify against the current key and any
// previous ones still configured. Tokens are revoked by id until they
// would have expired anyway.
package viewer

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/auth/secretbox"
)

// Mode is what the holder may do with the view.
type Mode string

// The viewer modes.
const (
	ModeView    Mode = "view"
	ModeControl Mode = "control"
)

// Why a token is refused.
var (
	ErrMissing      = errors.New("no viewer token: open the live view through a link from the API (?token=...)")
	ErrMalformed    = errors.New("viewer token is malformed")
	ErrBadSignature = errors.New("viewer token signature does not verify")
	ErrExpired      = errors.New("viewer token has expired: ask for a new link")
	ErrWrongSession = errors.New("viewer token is for another session")
	ErrRevoked      = errors.New("viewer token was revoked")
)

// Claims are what a token says.
type Claims struct {
	TokenID   string
	SessionID string
	Tenant    string
	Mode      Mode
	Expiry    time.Time
	// KeyID names the signing key that signed it.
	KeyID string
}

// SigningKey is one HMAC key. ID is short and public (it travels in every
// token); Secret must be at least 32 random bytes.
type SigningKey struct {
	ID     string
	Secret []byte
}

// Revocations remember revoked token ids until their expiry. Memory is the
// single-process one; a cluster backs it with Redis so every gateway
// replica sees a revocation.
type Revocations interface {
	Revoke(ctx context.Context, tokenID string, until time.Time) error
	IsRevoked(ctx context.Context, tokenID string) (bool, error)
}

// Config configures an Issuer.
type Config struct {
	// Keys: the first signs; all verify. Rotate by putting a new key first
	// and keeping the old one until the longest TTL has passed.
	Keys []SigningKey
	// DefaultTTL applies when Issue is given no TTL. Default 5m.
	DefaultTTL time.Duration
	// MaxTTL caps any TTL asked for. Default 1h.
	MaxTTL time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Issuer issues and verifies viewer tokens.
type Issuer struct {
	cfg  Config
	keys map[string][]byte
	rev  Revocations
}

const (
	tokenPrefix   = "dgv1."
	version       = 1
	tokenIDBytes  = 16
	maxTokenLen   = 2048
	maxFieldBytes = 255
	macDomain     = "deskgrid-viewer-token-v1\x00"
)

// New returns an issuer whose revocations live in rev (required): NewRedis
// where several gateways must agree, NewMemory for one process.
func New(cfg Config, rev Revocations) (*Issuer, error) {
	if rev == nil {
		return nil, errors.New("viewer tokens need a revocation store")
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("viewer tokens need at least one signing key")
	}
	keys := make(map[string][]byte, len(cfg.Keys))
	for _, k := range cfg.Keys {
		if k.ID == "" || len(k.ID) > maxFieldBytes {
			return nil, fmt.Errorf("viewer signing key id %q must be 1-%d bytes", k.ID, maxFieldBytes)
		}
		if len(k.Secret) < 32 {
			return nil, fmt.Errorf("viewer signing key %q must be at least 32 bytes, not %d", k.ID, len(k.Secret))
		}
		if _, dup := keys[k.ID]; dup {
			return nil, fmt.Errorf("viewer signing key id %q appears twice", k.ID)
		}
		keys[k.ID] = append([]byte(nil), k.Secret...)
	}
	if cfg.DefaultTTL <= 0 {
		cfg.DefaultTTL = 5 * time.Minute
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Issuer{cfg: cfg, keys: keys, rev: rev}, nil
}

// IssueViewerToken signs a token for sessionID of tenant in mode, valid
// for ttl (0: the default; capped at MaxTTL).
func (i *Issuer) IssueViewerToken(sessionID, tenant string, mode Mode, ttl time.Duration) (string, Claims, error) {
	if mode != ModeView && mode != ModeControl {
		return "", Claims{}, fmt.Errorf("viewer mode %q: want view or control", mode)
	}
	if sessionID == "" || len(sessionID) > maxFieldBytes || len(tenant) > maxFieldBytes {
		return "", Claims{}, fmt.Errorf("viewer token: session id must be 1-%d bytes and tenant at most %d", maxFieldBytes, maxFieldBytes)
	}
	if ttl <= 0 {
		ttl = i.cfg.DefaultTTL
	}
	ttl = min(ttl, i.cfg.MaxTTL)
	var tid [tokenIDBytes]byte
	_, _ = rand.Read(tid[:]) // crypto/rand never fails on supported systems
	key := i.cfg.Keys[0]
	c := Claims{
		TokenID:   hex.EncodeToString(tid[:]),
		SessionID: sessionID,
		Tenant:    tenant,
		Mode:      mode,
		// Whole seconds: what the payload carries.
		Expiry: i.cfg.Now().Add(ttl).Truncate(time.Second),
		KeyID:  key.ID,
	}
	payload := encode(c, tid)
	mac := sign(key.Secret, payload)
	enc := base64.RawURLEncoding
	return tokenPrefix + enc.EncodeToString(payload) + "." + enc.EncodeToString(mac), c, nil
}

// payload: version, mode, expiry (unix seconds), token id, then
// length-prefixed key id, session id and tenant.
func encode(c Claims, tid [tokenIDBytes]byte) []byte {
	b := make([]byte, 0, 2+8+tokenIDBytes+3+len(c.KeyID)+len(c.SessionID)+len(c.Tenant))
	m := byte(1)
	if c.Mode == ModeControl {
		m = 2
	}
	b = append(b, version, m)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Expiry.Unix()))
	b = append(b, tid[:]...)
	for _, s := range []string{c.KeyID, c.SessionID, c.Tenant} {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	return b
}

func decode(p []byte) (Claims, error) {
	if len(p) < 2+8+tokenIDBytes+3 || p[0] != version {
		return Claims{}, ErrMalformed
	}
	var c Claims
	switch p[1] {
	case 1:
		c.Mode = ModeView
	case 2:
		c.Mode = ModeControl
	default:
		return Claims{}, ErrMalformed
	}
	exp := binary.BigEndian.Uint64(p[2:10])
	if exp > 1<<40 { // far beyond any real expiry; keeps time arithmetic sane
		return Claims{}, ErrMalformed
	}
	c.Expiry = time.Unix(int64(exp), 0)
	c.TokenID = hex.EncodeToString(p[10 : 10+tokenIDBytes])
	rest := p[10+tokenIDBytes:]
	fields := make([]string, 3)
	for f := range fields {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return Claims{}, ErrMalformed
		}
		n := int(rest[0])
		fields[f] = string(rest[1 : 1+n])
		rest = rest[1+n:]
	}
	if len(rest) != 0 || fields[0] == "" || fields[1] == "" {
		return Claims{}, ErrMalformed
	}
	c.KeyID, c.SessionID, c.Tenant = fields[0], fields[1], fields[2]
	return c, nil
}

func sign(secret, payload []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(macDomain))
	h.Write(payload)
	return h.Sum(nil)
}

// ParseViewerToken checks a token's form and signature and returns its
// claims, without looking at expiry, session or revocation.
func (i *Issuer) ParseViewerToken(token string) (Claims, error) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok || len(token) > maxTokenLen {
		return Claims{}, ErrMalformed
	}
	p64, m64, ok := strings.Cut(rest, ".")
	if !ok {
		return Claims{}, ErrMalformed
	}
	enc := base64.RawURLEncoding.Strict()
	payload, err := enc.DecodeString(p64)
	if err != nil {
		return Claims{}, ErrMalformed
	}
	mac, err := enc.DecodeString(m64)
	if err != nil || len(mac) != sha256.Size {
		return Claims{}, ErrMalformed
	}
	c, err := decode(payload)
	if err != nil {
		return Claims{}, err
	}
	secret, ok := i.keys[c.KeyID]
	if !ok || !hmac.Equal(mac, sign(secret, payload)) {
		return Claims{}, ErrBadSignature
	}
	return c, nil
}

// VerifyViewerToken accepts token only for sessionID, before its expiry,
// and if not revoked.
func (i *Issuer) VerifyViewerToken(ctx context.Context, token, sessionID string) (Claims, error) {
	c, err := i.ParseViewerToken(token)
	if err != nil {
		return Claims{}, err
	}
	if !i.cfg.Now().Before(c.Expiry) {
		return Claims{}, ErrExpired
	}
	if c.SessionID != sessionID {
		return Claims{}, ErrWrongSession
	}
	revoked, err := i.rev.IsRevoked(ctx, c.TokenID)
	if err != nil {
		return Claims{}, fmt.Errorf("viewer token revocation check: %w", err)
	}
	if revoked {
		return Claims{}, ErrRevoked
	}
	return c, nil
}

// RevokeViewerToken revokes a token by id until expiry (the token's own
// expiry; after it the token is refused anyway). Pass Claims.Expiry, or
// now + MaxTTL when the expiry is unknown.
func (i *Issuer) RevokeViewerToken(ctx context.Context, tokenID string, expiry time.Time) error {
	if expiry.IsZero() {
		expiry = i.cfg.Now().Add(i.cfg.MaxTTL)
	}
	return i.rev.Revoke(ctx, tokenID, expiry)
}

// ParseKeys reads signing keys from configuration in the secretbox format
// (comma-separated "id:key", 32-byte keys in base64 or hex, current first).
func ParseKeys(spec string) ([]SigningKey, error) {
	keys, err := secretbox.ParseKeys(spec)
	if err != nil {
		return nil, fmt.Errorf("viewer signing keys: %w", err)
	}
	out := make([]SigningKey, len(keys))
	for i, k := range keys {
		out[i] = SigningKey{ID: k.ID, Secret: k.Secret}
	}
	return out, nil
}

// NewSigningKey returns a random key: for a single process with nothing
// configured, where tokens need not outlive a restart.
func NewSigningKey(id string) SigningKey {
	k := secretbox.NewKey(id)
	return SigningKey{ID: k.ID, Secret: k.Secret}
}
