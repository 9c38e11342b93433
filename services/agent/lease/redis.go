package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis keeps leases in Redis, so every agent replica sees one holder per
// session and one queue of waiters, and fencing tokens keep growing when an
// agent restarts. Each change is one Lua script, so it is atomic.
//
// Keys, under the prefix: lease:<session> (a hash: id, holder, token; it
// expires with the lease), lease:<session>:queue (waiting tickets, oldest
// first), lease:<session>:w:<ticket> (a waiter still asking; it expires when
// its process stops asking, and the waiter loses its place), lease:fence
// (the last fencing token, shared by every session). Grants and releases
// are published on lease:<session>:changed to wake the waiters.
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
	// alive is how long a waiter keeps its place without asking again.
	alive time.Duration
	// poll is how often a waiter asks again without being woken.
	poll time.Duration
	// opTimeout bounds every Redis call.
	opTimeout time.Duration
}

// NewRedis keeps leases under prefix (e.g. "deskgrid:") in rdb.
func NewRedis(rdb redis.UniversalClient, prefix string) (*Redis, error) {
	if rdb == nil {
		return nil, errors.New("lease: a Redis client is required")
	}
	return &Redis{rdb: rdb, prefix: prefix + "lease:", alive: 5 * time.Second, poll: time.Second, opTimeout: 5 * time.Second}, nil
}

// acquireScript queues ticket (once), drops dead waiters at the head of the
// queue, and grants the lease to ticket when it is first and the lease is
// free. It answers {1, token, pttl} for a grant, else {0, pttl of the
// current lease or -2, 1 if ticket is first}.
//
// The token is one more than the last one, and never below the server's
// clock in microseconds, so tokens keep growing even if Redis loses its
// data.
var acquireScript = redis.NewScript(`
local lease, queue, fence = KEYS[1], KEYS[2], KEYS[3]
local ticket, wprefix, alive = ARGV[1], ARGV[2], tonumber(ARGV[3])
local holder, id, ttl, channel = ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7]
redis.call('SET', wprefix .. ticket, 1, 'PX', alive)
if not redis.call('LPOS', queue, ticket) then
  redis.call('RPUSH', queue, ticket)
end
redis.call('PEXPIRE', queue, alive)
local dropped = false
while true do
  local head = redis.call('LINDEX', queue, 0)
  if not head or redis.call('EXISTS', wprefix .. head) == 1 then break end
  redis.call('LPOP', queue)
  dropped = true
end
if dropped then redis.call('PUBLISH', channel, 'queue') end
local first = 0
if redis.call('LINDEX', queue, 0) == ticket then first = 1 end
local pttl = redis.call('PTTL', lease)
if pttl ~= -2 or first == 0 then
  return {0, pttl, first}
end
redis.call('LPOP', queue)
redis.call('DEL', wprefix .. ticket)
local now = redis.call('TIME')
local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = tonumber(redis.call('GET', fence) or '0')
local token = math.max(last + 1, floor)
redis.call('SET', fence, string.format('%d', token))
redis.call('HSET', lease, 'id', id, 'holder', holder, 'token', string.format('%d', token))
redis.call('PEXPIRE', lease, ttl)
redis.call('PUBLISH', channel, 'granted')
return {1, token, ttl}
`)

// leaveScript takes ticket out of the queue.
var leaveScript = redis.NewScript(`
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('DEL', ARGV[2])
redis.call('PUBLISH', ARGV[3], 'queue')
return 1
`)

// renewScript extends the lease if id still holds it: {holder, token}.
var renewScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return false end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return {redis.call('HGET', KEYS[1], 'holder'), redis.call('HGET', KEYS[1], 'token')}
`)

// releaseScript ends the lease if id holds it and wakes the waiters.
var releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
`)

// statusScript answers {id, holder, token, pttl, waiting}: the lease's
// fields (false when nobody holds it), its remaining milliseconds, and the
// waiters still asking (a ticket whose waiter key lapsed is not counted).
var statusScript = redis.NewScript(`
local lease, queue, wprefix = KEYS[1], KEYS[2], ARGV[1]
local f = redis.call('HMGET', lease, 'id', 'holder', 'token')
local pttl = redis.call('PTTL', lease)
local waiting = 0
for _, t in ipairs(redis.call('LRANGE', queue, 0, -1)) do
  if redis.call('EXISTS', wprefix .. t) == 1 then waiting = waiting + 1 end
end
return {f[1], f[2], f[3], pttl, waiting}
`)

func (r *Redis) leaseKey(sessionID string) string { return r.prefix + sessionID }

// op bounds one Redis call.
func (r *Redis) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.opTimeout)
}

// Acquire implements Manager.
func (r *Redis) Acquire(ctx context.Context, sessionID, holder string, ttl time.Duration) (Lease, error) {
	if sessionID == "" || holder == "" {
		return Lease{}, ErrInvalid
	}
	ttl = normTTL(ttl)
	key := r.leaseKey(sessionID)
	queue, channel, wprefix := key+":queue", key+":changed", key+":w:"
	ticket, id := newID(), newID()

	// Listen before the first try, so no wake-up is missed.
	sub := r.rdb.Subscribe(ctx, channel)
	defer sub.Close()
	sctx, cancel := r.op(ctx)
	_, err := sub.Receive(sctx)
	cancel()
	if err != nil {
		return Lease{}, fmt.Errorf("input lease of %s: %w", sessionID, err)
	}
	woken := sub.Channel()

	for {
		octx, cancel := r.op(ctx)
		res, err := acquireScript.Run(octx, r.rdb, []string{key, queue, r.prefix + "fence"},
			ticket, wprefix, r.alive.Milliseconds(), holder, id, ttl.Milliseconds(), channel).Int64Slice()
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return Lease{}, r.leave(ctx, sessionID, queue, ticket, wprefix, channel)
			}
			return Lease{}, fmt.Errorf("input lease of %s: %w", sessionID, err)
		}
		if len(res) != 3 {
			return Lease{}, fmt.Errorf("input lease of %s: unexpected answer %v", sessionID, res)
		}
		if res[0] == 1 {
			return Lease{SessionID: sessionID, Holder: holder, ID: id, Token: res[1], Expires: time.Now().Add(ttl)}, nil
		}
		wait := r.poll
		if pttl := time.Duration(res[1]) * time.Millisecond; res[2] == 1 && pttl >= 0 && pttl < wait {
			wait = pttl + time.Millisecond
		}
		t := time.NewTimer(wait)
		select {
		case <-woken:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Lease{}, r.leave(ctx, sessionID, queue, ticket, wprefix, channel)
		}
		t.Stop()
	}
}

// leave gives up a place in the queue when the caller stops waiting.
func (r *Redis) leave(ctx context.Context, sessionID, queue, ticket, wprefix, channel string) error {
	octx, cancel := r.op(context.WithoutCancel(ctx))
	defer cancel()
	// A place not given up here lapses by itself once it stops being renewed.
	_ = leaveScript.Run(octx, r.rdb, []string{queue}, ticket, wprefix+ticket, channel).Err()
	return fmt.Errorf("waiting for the input lease of %s: %w", sessionID, ctx.Err())
}

// Renew implements Manager.
func (r *Redis) Renew(ctx context.Context, sessionID, id string, ttl time.Duration) (Lease, error) {
	if id == "" {
		return Lease{}, fmt.Errorf("renew input lease of %s: %w", sessionID, ErrNotHolder)
	}
	ttl = normTTL(ttl)
	octx, cancel := r.op(ctx)
	defer cancel()
	res, err := renewScript.Run(octx, r.rdb, []string{r.leaseKey(sessionID)}, id, ttl.Milliseconds()).StringSlice()
	if errors.Is(err, redis.Nil) {
		return Lease{}, fmt.Errorf("renew input lease of %s: %w", sessionID, ErrNotHolder)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("renew input lease of %s: %w", sessionID, err)
	}
	var token int64
	if len(res) != 2 {
		return Lease{}, fmt.Errorf("renew input lease of %s: unexpected answer %v", sessionID, res)
	}
	if _, err := fmt.Sscan(res[1], &token); err != nil {
		return Lease{}, fmt.Errorf("renew input lease of %s: token %q: %w", sessionID, res[1], err)
	}
	return Lease{SessionID: sessionID, Holder: res[0], ID: id, Token: token, Expires: time.Now().Add(ttl)}, nil
}

// Release implements Manager.
func (r *Redis) Release(ctx context.Context, sessionID, id string) error {
	if id == "" {
		return nil
	}
	key := r.leaseKey(sessionID)
	octx, cancel := r.op(ctx)
	defer cancel()
	if err := releaseScript.Run(octx, r.rdb, []string{key}, id, key+":changed").Err(); err != nil {
		return fmt.Errorf("release input lease of %s: %w", sessionID, err)
	}
	return nil
}

// Status implements Manager.
func (r *Redis) Status(ctx context.Context, sessionID string) (Status, error) {
	key := r.leaseKey(sessionID)
	octx, cancel := r.op(ctx)
	defer cancel()
	res, err := statusScript.Run(octx, r.rdb, []string{key, key + ":queue"}, key+":w:").Slice()
	if err != nil {
		return Status{}, fmt.Errorf("input lease of %s: %w", sessionID, err)
	}
	if len(res) != 5 {
		return Status{}, fmt.Errorf("input lease of %s: unexpected answer %v", sessionID, res)
	}
	pttl, _ := res[3].(int64)
	waiting, _ := res[4].(int64)
	st := Status{Waiting: int(waiting)}
	id, _ := res[0].(string)
	holder, _ := res[1].(string)
	tok, _ := res[2].(string)
	if id == "" || pttl <= 0 {
		return st, nil
	}
	var token int64
	if _, err := fmt.Sscan(tok, &token); err != nil {
		return Status{}, fmt.Errorf("input lease of %s: token %q: %w", sessionID, tok, err)
	}
	st.Held = true
	st.Lease = Lease{SessionID: sessionID, Holder: holder, ID: id, Token: token, Expires: time.Now().Add(time.Duration(pttl) * time.Millisecond)}
	return st, nil
}
