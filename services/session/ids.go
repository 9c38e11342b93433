package session

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

const idPrefix = "s-"

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns "s-" and 20 random lowercase base32 characters (100 bits).
func newID() string {
	var b [13]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return idPrefix + idEncoding.EncodeToString(b[:])[:20]
}

// validID reports whether id has the shape newID makes.
func validID(id string) bool {
	rest, ok := strings.CutPrefix(id, idPrefix)
	if !ok || len(rest) != 20 {
		return false
	}
	for _, c := range rest {
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}
