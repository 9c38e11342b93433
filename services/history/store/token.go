package store

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
)

const tokenVersion = 1

// normalizeTypes sorts and deduplicates a type filter so that the same set
// in another order is the same query.
func normalizeTypes(types []string) []string {
	if len(types) == 0 {
		return nil
	}
	out := slices.Clone(types)
	slices.Sort(out)
	return slices.Compact(out)
}

// queryHash binds a page token to the filters it was issued for.
func queryHash(parts ...string) uint64 {
	h := fnv.New64a()
	for _, s := range parts {
		// Length prefixes keep ("ab","c") apart from ("a","bc").
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	return h.Sum64()
}

// encodeToken makes the opaque token for the page after position lastSeq.
func encodeToken(lastSeq int64, hash uint64) string {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+8)
	b = append(b, tokenVersion)
	b = binary.AppendVarint(b, lastSeq)
	b = binary.BigEndian.AppendUint64(b, hash)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeToken returns the last sequence a token stands for, refusing a token
// of another version or another query.
func decodeToken(tok string, hash uint64) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 1+1+8 || b[0] != tokenVersion {
		return 0, fmt.Errorf("%w: malformed", ErrInvalidPageToken)
	}
	seq, n := binary.Varint(b[1:])
	if n <= 0 || 1+n+8 != len(b) || seq < 0 {
		return 0, fmt.Errorf("%w: malformed", ErrInvalidPageToken)
	}
	if binary.BigEndian.Uint64(b[1+n:]) != hash {
		return 0, fmt.Errorf("%w: it was issued for another query", ErrInvalidPageToken)
	}
	return seq, nil
}
