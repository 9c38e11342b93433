package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// RedisConfig tunes a Redis counter.
type RedisConfig struct {
	// Rate and Burst as in Config.
	Rate  float64
	Burst int
	// Prefix starts every key (the deployment's Redis prefix).
	Prefix string
	// Timeout bounds one round trip. Default 500ms.
	Timeout time.Duration
}

// Redis counts requests in Redis with GCRA (go-redis/redis_rate), so every
// process of a cluster shares one allowance per key.
type Redis struct {
	lim     *redis_rate.Limiter
	limit   redis_rate.Limit
	prefix  string
	timeout time.Duration
}

// NewRedis returns a counter in rdb.
func NewRedis(rdb redis.UniversalClient, cfg RedisConfig) (*Redis, error) {
	if rdb == nil {
		return nil, errors.New("ratelimit: a Redis client is required")
	}
	if cfg.Rate <= 0 {
		return nil, fmt.Errorf("ratelimit: rate must be positive, got %v", cfg.Rate)
	}
	if cfg.Burst <= 0 {
		cfg.Burst = max(1, int(math.Ceil(2*cfg.Rate)))
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 500 * time.Millisecond
	}
	// One request per emission interval, Burst at once.
	limit := redis_rate.Limit{Rate: 1, Period: time.Duration(float64(time.Second) / cfg.Rate), Burst: cfg.Burst}
	return &Redis{lim: redis_rate.NewLimiter(rdb), limit: limit, prefix: cfg.Prefix + "ratelimit:", timeout: cfg.Timeout}, nil
}

// Take implements Counter.
func (r *Redis) Take(ctx context.Context, key string) (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	res, err := r.lim.Allow(ctx, r.prefix+key, r.limit)
	if err != nil {
		return false, 0, fmt.Errorf("rate limit in Redis: %w", err)
	}
	if res.Allowed > 0 {
		return true, 0, nil
	}
	return false, max(res.RetryAfter, time.Millisecond), nil
}
