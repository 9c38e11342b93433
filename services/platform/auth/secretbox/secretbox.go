// Package secretbox encrypts secrets kept at rest (provider keys a user
// brings, tokens for other systems) with AES-256-GCM under a key from
// configuration. A sealed value names the key that sealed it, so keys
// rotate: a Box opens with any configured key and seals with the first.
//
// Sealed format (version 1):
//
//	0x01 | len(keyID) | keyID | nonce (12 random bytes) | ciphertext+tag
//
// The version and key id are authenticated with the caller's associated
// data (say, the run id), so a sealed value moved to another record, or
// relabelled with another key id, does not open.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the length of every key: AES-256.
const KeySize = 32

const version = 1

// ErrOpen: the value is damaged, belongs to other associated data, or was
// sealed with a key that is not configured.
var ErrOpen = errors.New("sealed secret does not open")

// Key is one encryption key and its public id (short, stored with every
// value it seals).
type Key struct {
	ID     string
	Secret []byte
}

// Box seals with the current key and opens with any.
type Box struct {
	current string
	aeads   map[string]cipher.AEAD
}

// New returns a box; keys[0] is current. Keys must be KeySize bytes with
// distinct ids of 1-255 bytes.
func New(keys ...Key) (*Box, error) {
	if len(keys) == 0 {
		return nil, errors.New("secretbox needs at least one key")
	}
	b := &Box{current: keys[0].ID, aeads: make(map[string]cipher.AEAD, len(keys))}
	for _, k := range keys {
		if k.ID == "" || len(k.ID) > 255 {
			return nil, fmt.Errorf("secretbox key id %q must be 1-255 bytes", k.ID)
		}
		if len(k.Secret) != KeySize {
			return nil, fmt.Errorf("secretbox key %q must be %d bytes, not %d", k.ID, KeySize, len(k.Secret))
		}
		if _, dup := b.aeads[k.ID]; dup {
			return nil, fmt.Errorf("secretbox key id %q appears twice", k.ID)
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("secretbox key %q: %w", k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("secretbox key %q: %w", k.ID, err)
		}
		b.aeads[k.ID] = aead
	}
	return b, nil
}

// ParseKeys reads keys from configuration: comma-separated "id:key", the
// key in standard or URL base64 or hex, current first; e.g.
// "2026-06:BASE64...,2026-01:BASE64...".
func ParseKeys(spec string) ([]Key, error) {
	var out []Key
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, enc, ok := strings.Cut(part, ":")
		if !ok || id == "" {
			return nil, fmt.Errorf("secretbox key %q: want id:key", redact(part))
		}
		secret, err := decodeKey(enc)
		if err != nil {
			return nil, fmt.Errorf("secretbox key %q: %w", id, err)
		}
		out = append(out, Key{ID: id, Secret: secret})
	}
	if len(out) == 0 {
		return nil, errors.New("no secretbox keys configured")
	}
	return out, nil
}

func decodeKey(s string) ([]byte, error) {
	for _, dec := range []func(string) ([]byte, error){
		hex.DecodeString,
		base64.StdEncoding.DecodeString,
		base64.RawStdEncoding.DecodeString,
		base64.URLEncoding.DecodeString,
		base64.RawURLEncoding.DecodeString,
	} {
		if b, err := dec(s); err == nil && len(b) == KeySize {
			return b, nil
		}
	}
	return nil, fmt.Errorf("want %d bytes in hex or base64 (make one with: head -c %d /dev/urandom | base64)", KeySize, KeySize)
}

// redact keeps a key out of an error message.
func redact(part string) string {
	if id, _, ok := strings.Cut(part, ":"); ok {
		return id + ":…"
	}
	if len(part) > 4 {
		return part[:4] + "…"
	}
	return part
}

// NewKey returns a fresh random key with id.
func NewKey(id string) Key {
	k := Key{ID: id, Secret: make([]byte, KeySize)}
	_, _ = rand.Read(k.Secret) // crypto/rand never fails on supported systems
	return k
}

func header(keyID string) []byte {
	h := make([]byte, 0, 2+len(keyID))
	h = append(h, version, byte(len(keyID)))
	return append(h, keyID...)
}

func aad(hdr, associated []byte) []byte {
	out := make([]byte, 0, len(hdr)+len(associated))
	return append(append(out, hdr...), associated...)
}

// Seal encrypts plaintext with the current key, bound to associated (which
// Open must be given again; nil is fine).
func (b *Box) Seal(plaintext, associated []byte) []byte {
	aead := b.aeads[b.current]
	hdr := header(b.current)
	out := make([]byte, len(hdr)+aead.NonceSize(), len(hdr)+aead.NonceSize()+len(plaintext)+aead.Overhead())
	copy(out, hdr)
	nonce := out[len(hdr):]
	_, _ = rand.Read(nonce) // a random 96-bit nonce per value: safe far beyond any realistic count of secrets
	return aead.Seal(out, nonce, plaintext, aad(hdr, associated))
}

// Open decrypts what Seal returned with the same associated data.
func (b *Box) Open(sealed, associated []byte) ([]byte, error) {
	id, err := KeyID(sealed)
	if err != nil {
		return nil, err
	}
	aead, ok := b.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w: sealed with key %q, which is not configured", ErrOpen, id)
	}
	hdr := sealed[:2+len(id)]
	rest := sealed[len(hdr):]
	if len(rest) < aead.NonceSize()+aead.Overhead() {
		return nil, ErrOpen
	}
	out, err := aead.Open(nil, rest[:aead.NonceSize()], rest[aead.NonceSize():], aad(hdr, associated))
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}

// KeyID names the key a sealed value was sealed with.
func KeyID(sealed []byte) (string, error) {
	if len(sealed) < 2 || sealed[0] != version || len(sealed) < 2+int(sealed[1]) || sealed[1] == 0 {
		return "", fmt.Errorf("%w: not a version %d sealed secret", ErrOpen, version)
	}
	return string(sealed[2 : 2+int(sealed[1])]), nil
}

// CurrentKeyID is the key Seal uses.
func (b *Box) CurrentKeyID() string { return b.current }

// NeedsRotation reports whether sealed was sealed with a key other than
// the current one (or cannot be read), for a re-encryption sweep.
func (b *Box) NeedsRotation(sealed []byte) bool {
	id, err := KeyID(sealed)
	return err != nil || id != b.current
}

// Reseal opens sealed and seals it again with the current key; values
// already under the current key come back unchanged.
func (b *Box) Reseal(sealed, associated []byte) ([]byte, error) {
	if !b.NeedsRotation(sealed) {
		if _, err := b.Open(sealed, associated); err != nil {
			return nil, err
		}
		return sealed, nil
	}
	plain, err := b.Open(sealed, associated)
	if err != nil {
		return nil, err
	}
	defer clear(plain)
	return b.Seal(plain, associated), nil
}
