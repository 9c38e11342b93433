package viewer

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis keeps revocations in Redis so every gateway replica sees them; each
// is a key that expires with its token.
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewRedis stores revocations under prefix (e.g. "deskgrid:") in rdb.
func NewRedis(rdb redis.UniversalClient, prefix string) *Redis {
	return &Redis{rdb: rdb, prefix: prefix + "viewer:revoked:"}
}

// Revoke implements Revocations.
func (r *Redis) Revoke(ctx context.Context, tokenID string, until time.Time) error {
	if !time.Now().Before(until) {
		return nil // expired already: refused anyway
	}
	// One command sets the key and its expiry, so no revocation outlives
	// its token.
	if err := r.rdb.Do(ctx, "SET", r.prefix+tokenID, 1, "PXAT", until.UnixMilli()).Err(); err != nil {
		return fmt.Errorf("revoke viewer token: %w", err)
	}
	return nil
}

// IsRevoked implements Revocations.
func (r *Redis) IsRevoked(ctx context.Context, tokenID string) (bool, error) {
	n, err := r.rdb.Exists(ctx, r.prefix+tokenID).Result()
	if err != nil {
		return false, fmt.Errorf("viewer token revocation: %w", err)
	}
	return n > 0, nil
}
