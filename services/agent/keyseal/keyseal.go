// Package keyseal encrypts the API keys runs bring, so a key that must
// outlive the process (to continue a run after a restart) is never stored
// in clear. AES-256-GCM; the run id is bound in as additional data, so a
// sealed key copied onto another run does not open.
package keyseal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// ErrOpen: the sealed key is damaged, belongs to another run or was sealed
// with another key.
var ErrOpen = errors.New("sealed key does not open")

// Sealer seals and opens keys with one key-encryption key.
type Sealer struct {
	aead cipher.AEAD
}

// New returns a sealer for a 32-byte key-encryption key.
func New(kek []byte) (*Sealer, error) {
	if len(kek) != 32 {
		return nil, fmt.Errorf("key-encryption key must be 32 bytes, not %d", len(kek))
	}
	block, err := aes.NewCipher(kek)
	if err != nil {
		return nil, fmt.Errorf("key-encryption key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("key-encryption key: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// Seal encrypts secret for the run runID: nonce || ciphertext.
func (s *Sealer) Seal(runID string, secret []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(secret)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return s.aead.Seal(nonce, nonce, secret, []byte(runID))
}

// Open decrypts what Seal returned for runID.
func (s *Sealer) Open(runID string, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n+s.aead.Overhead() {
		return nil, ErrOpen
	}
	out, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(runID))
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}
