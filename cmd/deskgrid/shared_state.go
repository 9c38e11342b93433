package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

// State that replicas of a role must share lives in Redis in a cluster, and
// in this process only where one process is the whole deployment: deskgrid
// up, or a role started without -redis-url. Each choice is made here, by
// name, never by a constructor's nil default.

// redisTimeout bounds one Redis round trip.
const redisTimeout = 2 * time.Second

// redisClient connects to -redis-url, checking it answers.
func (s *setup) redisClient(ctx context.Context) (*redis.Client, error) {
	opt, err := redis.ParseURL(s.cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis-url: %w", err)
	}
	// Every call has a deadline: the caller's context (go-redis ignores it
	// unless told), and at most redisTimeout for one round trip, so a
	// frozen Redis fails calls fast (Unavailable) instead of holding them.
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = redisTimeout, redisTimeout, redisTimeout
	opt.PoolTimeout = redisTimeout
	rdb := redis.NewClient(opt)
	rdb.AddHook(metrics.RedisHook{})
	s.closers.add("redis", func(context.Context) error { return rdb.Close() })
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		return nil, fmt.Errorf("connect to Redis at %s: %w", opt.Addr, err)
	}
	return rdb, nil
}
