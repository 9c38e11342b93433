package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
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
	if _, err := m.Renew(ctx, "s", "a", a.Token, time.Second); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("renew after expiry: %v", err)
	}
	if err := m.Check(ctx, "s", a.Token); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("check after expiry: %v", err)
	}
	b, err := m.Acquire(ctx, "s", "b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token <= a.Token {
		t.Fatalf("token %d not newer than %d", b.Token, a.Token)
	}
}

func TestWaitersAreServedInOrder(t *testing.T) {
	m := NewMemory(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := m.Acquire(ctx, "s", "first", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 2)
	for _, h := range []string{"w1", "w2"} {
		go func() {
			l, err := m.Acquire(ctx, "s", h, time.Minute)
			if err == nil {
				got <- h
				_ = m.Release(ctx, "s", h, l.Token)
			}
		}()
		// The queue order is the order of arrival: wait until h is queued.
		for {
			m.mu.Lock()
			n := len(m.sessions["s"].queue)
			m.mu.Unlock()
			if (h == "w1" && n == 1) || (h == "w2" && n == 2) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	_ = m.Release(ctx, "s", "first", first.Token)
	if a, b := <-got, <-got; a != "w1" || b != "w2" {
		t.Fatalf("served %s then %s", a, b)
	}
}
