package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestExpiredHolderIsRefusedAndNextGetsNewerToken(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	m := NewMemory(c.now)
	ctx := context.Background()
	a, err := m.Acquire(ctx, "s", "a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.add(2 * time.Second)
	if _, err := m.Renew(ctx, "s", a.ID, time.Second); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("renew after expiry: %v", err)
	}
	b, err := m.Acquire(ctx, "s", "b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token <= a.Token {
		t.Fatalf("token %d not newer than %d", b.Token, a.Token)
	}
}

// redisClient is the test Redis (DESKGRID_TEST_REDIS_URL, default the
// local one) and a key prefix of the test's own, removed at the end.
func redisClient(t *testing.T) (*redis.Client, string) {
	t.Helper()
	url := os.Getenv("DESKGRID_TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "dgtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		rdb.Close()
	})
	return rdb, prefix
}

func newRedis(t *testing.T, rdb redis.UniversalClient, prefix string) *Redis {
	t.Helper()
	r, err := NewRedis(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// managers are every implementation, each tested against the same
// contract. Two Redis managers sharing a prefix stand for two agent
// replicas.
func managers(t *testing.T) map[string][2]Manager {
	rdb, prefix := redisClient(t)
	m := NewMemory(nil)
	return map[string][2]Manager{
		"memory": {m, m},
		"redis":  {newRedis(t, rdb, prefix), newRedis(t, rdb, prefix)},
	}
}

func TestWaitersAreServedInOrder(t *testing.T) {
	for name, ms := range managers(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			first, err := ms[0].Acquire(ctx, "s", "first", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 2)
			queued := make(chan struct{})
			for i, h := range []string{"w1", "w2"} {
				go func() {
					// w2 asks once w1 waits; each asks a different replica.
					if i == 1 {
						<-queued
					}
					l, err := ms[i].Acquire(ctx, "s", h, time.Minute)
					if err == nil {
						got <- h
						_ = ms[i].Release(ctx, "s", l.ID)
					}
				}()
				if i == 0 {
					waitQueued(t, ms[0], "s", 1)
					close(queued)
				} else {
					waitQueued(t, ms[0], "s", 2)
				}
			}
			if err := ms[1].Release(ctx, "s", first.ID); err != nil {
				t.Fatal(err)
			}
			if a, b := <-got, <-got; a != "w1" || b != "w2" {
				t.Fatalf("served %s then %s", a, b)
			}
		})
	}
}

// waitQueued waits until n requests wait for the lease of session.
func waitQueued(t *testing.T, m Manager, session string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int
		switch m := m.(type) {
		case *Memory:
			m.mu.Lock()
			got = len(m.sessions[session].queue)
			m.mu.Unlock()
		case *Redis:
			l, err := m.rdb.LLen(context.Background(), m.leaseKey(session)+":queue").Result()
			if err != nil {
				t.Fatal(err)
			}
			got = int(l)
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// The lease is renewed and released only by its id, whatever the holder
// name or token a caller knows, and only one holder has a session's lease
// across replicas.
func TestOnlyTheGrantsIDRenewsAndReleases(t *testing.T) {
	for name, ms := range managers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a, err := ms[0].Acquire(ctx, "s", "alice", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if len(a.ID) != 32 {
				t.Fatalf("lease id %q is not 128 bits in hex", a.ID)
			}
			for _, guess := range []string{"", "alice", "1", a.Holder + ":1"} {
				if _, err := ms[1].Renew(ctx, "s", guess, time.Minute); !errors.Is(err, ErrNotHolder) {
					t.Fatalf("renew with %q: %v", guess, err)
				}
				if err := ms[1].Release(ctx, "s", guess); err != nil {
					t.Fatal(err)
				}
			}
			// Still held: another request, under the same name, waits.
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err = ms[1].Acquire(wctx, "s", "alice", time.Minute)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("second acquire while held: %v", err)
			}
			r, err := ms[1].Renew(ctx, "s", a.ID, time.Minute)
			if err != nil || r.Token != a.Token || r.Holder != "alice" {
				t.Fatalf("renew by id: %+v, %v", r, err)
			}
			if err := ms[1].Release(ctx, "s", a.ID); err != nil {
				t.Fatal(err)
			}
			b, err := ms[1].Acquire(ctx, "s", "bob", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if b.Token <= a.Token || b.ID == a.ID {
				t.Fatalf("second grant %+v after %+v", b, a)
			}
		})
	}
}

// Two replicas racing for one session: never two holders at once.
func TestOneHolderAcrossReplicas(t *testing.T) {
	rdb, prefix := redisClient(t)
	replicas := []Manager{newRedis(t, rdb, prefix), newRedis(t, rdb, prefix)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	holders, most, last := 0, 0, int64(0)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := replicas[i%2]
			for range 5 {
				l, err := m.Acquire(ctx, "s", "h", time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				holders++
				most = max(most, holders)
				if l.Token <= last {
					t.Errorf("token %d after %d", l.Token, last)
				}
				last = l.Token
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holders--
				mu.Unlock()
				if err := m.Release(ctx, "s", l.ID); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if most != 1 {
		t.Fatalf("%d holders at once", most)
	}
}

// A waiter whose process stopped asking loses its place; the holder's
// lease expiring hands it on without a release.
func TestDeadWaiterLosesItsPlaceAndExpiryHandsOn(t *testing.T) {
	rdb, prefix := redisClient(t)
	r := newRedis(t, rdb, prefix)
	r.alive = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := r.Acquire(ctx, "s", "a", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter of a process that died: queued, never asking again.
	key := r.leaseKey("s")
	rdb.RPush(ctx, key+":queue", "dead-ticket")
	b, err := r.Acquire(ctx, "s", "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token <= a.Token {
		t.Fatalf("token %d after %d", b.Token, a.Token)
	}
	if n, _ := rdb.LLen(ctx, key+":queue").Result(); n != 0 {
		t.Fatalf("%d left in the queue", n)
	}
}

// Tokens keep growing when the agent restarts (a new manager), and even
// when Redis loses its data.
func TestTokensGrowAcrossRestartsAndRedisLoss(t *testing.T) {
	rdb, prefix := redisClient(t)
	ctx := context.Background()
	first := newRedis(t, rdb, prefix)
	a, err := first.Acquire(ctx, "s", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx, "s", a.ID); err != nil {
		t.Fatal(err)
	}
	restarted := newRedis(t, rdb, prefix)
	b, err := restarted.Acquire(ctx, "s", "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token <= a.Token {
		t.Fatalf("after a restart token %d, before %d", b.Token, a.Token)
	}
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, keys...)
	c, err := restarted.Acquire(ctx, "s", "c", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if c.Token <= b.Token {
		t.Fatalf("after Redis lost its data token %d, before %d", c.Token, b.Token)
	}
}

func TestNewRedisRefusesNoClient(t *testing.T) {
	if _, err := NewRedis(nil, "p:"); err == nil {
		t.Fatal("NewRedis(nil) succeeded")
	}
}

// Status tells the holder, token and expiry of the lease and how many wait,
// and that nobody holds a lease never granted, released or expired.
func TestStatusTellsHolderAndWaiters(t *testing.T) {
	for name, ms := range managers(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			m := ms[0]
			if st, err := m.Status(ctx, "s"); err != nil || st.Held || st.Waiting != 0 {
				t.Fatalf("never granted: %+v, %v", st, err)
			}
			before := time.Now()
			a, err := m.Acquire(ctx, "s", "run-a", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			// Every replica tells the same.
			st, err := ms[1].Status(ctx, "s")
			if err != nil || !st.Held || st.Lease.Holder != "run-a" || st.Lease.Token != a.Token || st.Lease.ID != a.ID || st.Waiting != 0 {
				t.Fatalf("held by run-a (%+v): %+v, %v", a, st, err)
			}
			if st.Lease.Expires.Before(before.Add(time.Minute-time.Second)) || st.Lease.Expires.After(time.Now().Add(time.Minute)) {
				t.Fatalf("expires %v, granted for a minute at %v", st.Lease.Expires, before)
			}
			wctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := ms[1].Acquire(wctx, "s", "run-b", time.Minute)
				done <- err
			}()
			waitQueued(t, m, "s", 1)
			if st, err := m.Status(ctx, "s"); err != nil || st.Waiting != 1 || st.Lease.Holder != "run-a" {
				t.Fatalf("one waiting: %+v, %v", st, err)
			}
			stop()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the waiter that gave up: %v", err)
			}
			if st, err := m.Status(ctx, "s"); err != nil || st.Waiting != 0 {
				t.Fatalf("the waiter left: %+v, %v", st, err)
			}
			if err := m.Release(ctx, "s", a.ID); err != nil {
				t.Fatal(err)
			}
			if st, err := m.Status(ctx, "s"); err != nil || st.Held {
				t.Fatalf("released: %+v, %v", st, err)
			}
		})
	}
}

// An expired lease is no lease, in memory (the clock moves) and in Redis
// (the key lapses).
func TestStatusOfAnExpiredLeaseIsFree(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	m := NewMemory(c.now)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := m.Acquire(ctx, "s", "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if st, _ := m.Status(ctx, "s"); !st.Held || !st.Lease.Expires.Equal(time.Unix(1001, 0)) {
		t.Fatalf("held: %+v", st)
	}
	c.add(time.Second)
	if st, err := m.Status(ctx, "s"); err != nil || st.Held {
		t.Fatalf("memory, expired: %+v, %v", st, err)
	}

	rdb, prefix := redisClient(t)
	r := newRedis(t, rdb, prefix)
	if _, err := r.Acquire(ctx, "s", "a", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for {
		// Redis lapses the lease key by itself; Status must never tell a
		// holder of a lease whose key is gone.
		st, err := r.Status(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if st.Held && !st.Lease.Expires.After(time.Now().Add(-time.Second)) {
			t.Fatalf("held with expiry %v", st.Lease.Expires)
		}
		if !st.Held {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the Redis lease never lapsed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A ticket whose waiter stopped asking is not counted.
	rdb.RPush(ctx, r.leaseKey("s")+":queue", "dead-ticket")
	if st, err := r.Status(ctx, "s"); err != nil || st.Waiting != 0 || st.Held {
		t.Fatalf("dead ticket: %+v, %v", st, err)
	}
}
