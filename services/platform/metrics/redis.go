package metrics

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	redisCall  = histogram("deskgrid.redis.call.duration", "one Redis call (a command, or a pipeline), by command and outcome")
	redisDials = counter("deskgrid.redis.dials", "",
		"connections the Redis client opened, by outcome (ok, error): past the pool's first ones, each is a reconnect after a connection was lost or closed")
)

// RedisHook times every call of the Redis client it is added to
// (rdb.AddHook(metrics.RedisHook{})): deskgrid_redis_call_duration_seconds
// by command (the commands deskgrid sends, a fixed set; `pipeline` for a
// pipeline or transaction) and outcome: ok (a missing key too), timeout,
// cancelled, error (Redis answered with an error), unavailable (no answer:
// the connection failed).
type RedisHook struct{}

// DialHook counts every connection the client opens: deskgrid_redis_dials_total
// by outcome. A pool opens a few at start; a rate that keeps climbing means
// connections are lost and made again (Redis restarted, a network path
// flapping, idle connections cut by something between).
func (RedisHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		o := "ok"
		if err != nil {
			o = "error"
		}
		redisDials.Add(context.WithoutCancel(ctx), 1, attrs("outcome", o))
		return c, err
	}
}

func (RedisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		redisCall.Record(ctx, time.Since(start).Seconds(), attrs("command", redisCommand(cmd.Name()), "outcome", redisOutcome(err)))
		return err
	}
}

func (RedisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		redisCall.Record(ctx, time.Since(start).Seconds(), attrs("command", "pipeline", "outcome", redisOutcome(err)))
		return err
	}
}

// redisCommand keeps the label to command names: lower-case letters, short.
func redisCommand(name string) string {
	if name == "" || len(name) > 24 {
		return "other"
	}
	for _, c := range name {
		if (c < 'a' || c > 'z') && c != '.' && c != '_' {
			return "other"
		}
	}
	return name
}

func redisOutcome(err error) string {
	var rerr redis.Error
	var nerr net.Error
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		return "ok"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.As(err, &rerr):
		return "error"
	default:
		return "unavailable"
	}
}
