package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"strings"
)

// KeyPrefix starts every API key, so keys are recognisable in config files
// and by secret scanners.
const KeyPrefix = "dg_"

const (
	keyIDBytes     = 8  // 16 hex characters: the indexed lookup id
	keySecretBytes = 32 // 256 bits of randomness: far beyond guessing
	keyIDLen       = keyIDBytes * 2
	keySecretLen   = 52 // base32 of 32 bytes, unpadded
)

// Lower-case base32 keeps the secret free of '_' (the separator) and easy to
// select with a double click.
var secretEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// ErrMalformedKey: the string is not an API key of deskgrid's format.
var ErrMalformedKey = errors.New("malformed API key: want dg_<id>_<secret>")

// NewKey returns a fresh random key: its plaintext, its id and the hash to
// store.
func NewKey() (plaintext, id string, hash []byte) {
	var idb [keyIDBytes]byte
	var sec [keySecretBytes]byte
	_, _ = rand.Read(idb[:]) // crypto/rand never fails on supported systems
	_, _ = rand.Read(sec[:])
	id = hex.EncodeToString(idb[:])
	secret := secretEncoding.EncodeToString(sec[:])
	return KeyPrefix + id + "_" + secret, id, HashSecret(id, secret)
}

// ParseKey splits a key into its id and secret, checking the exact format
// so a garbled key fails here rather than in a database lookup.
func ParseKey(key string) (id, secret string, err error) {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok || len(rest) != keyIDLen+1+keySecretLen || rest[keyIDLen] != '_' {
		return "", "", ErrMalformedKey
	}
	id, secret = rest[:keyIDLen], rest[keyIDLen+1:]
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", "", ErrMalformedKey
		}
	}
	for i := 0; i < len(secret); i++ {
		c := secret[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return "", "", ErrMalformedKey
		}
	}
	// The last character of unpadded base32 of 32 bytes carries 4 spare
	// bits; a round trip rejects a string no key could produce.
	if b, err := secretEncoding.DecodeString(secret); err != nil || secretEncoding.EncodeToString(b) != secret {
		return "", "", ErrMalformedKey
	}
	return id, secret, nil
}

// HashSecret is what the store keeps for a key. The secret is 256 random
// bits, so a fast hash is enough (nothing to brute-force, unlike a
// password); the id is bound in so a hash is only valid under its own id.
func HashSecret(id, secret string) []byte {
	h := sha256.New()
	h.Write([]byte("deskgrid-api-key-v1\x00"))
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(secret))
	return h.Sum(nil)
}

// SecretMatches compares a presented secret with a stored hash in constant
// time.
func SecretMatches(id, secret string, hash []byte) bool {
	return subtle.ConstantTimeCompare(HashSecret(id, secret), hash) == 1
}
