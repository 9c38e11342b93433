// Package lease grants the input lease of a session: one holder at a time
// may send input to the display, waiters are served first come first
// served, and every grant carries a larger fencing token so the display can
// refuse a holder whose lease has passed on.
package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lease is a grant of a session's input.
type Lease struct {
	SessionID string
	Holder    string
	Token     int64
	Expires   time.Time
}

var (
	// ErrNotHolder: the lease named is not held (it expired, was released
	// or passed to another holder).
	ErrNotHolder = errors.New("input lease not held")
	// ErrInvalid: a request without session or holder.
	ErrInvalid = errors.New("input lease needs a session and a holder")
)

// Manager grants input leases. Memory is the single-process one; a Redis
// implementation keeps the same contract for a cluster.
type Manager interface {
	// Acquire waits in FIFO order until holder has the lease, or ctx ends.
	// A holder that already has the lease gets it renewed.
	Acquire(ctx context.Context, sessionID, holder string, ttl time.Duration) (Lease, error)
	// Renew extends the lease if holder still has it with token.
	Renew(ctx context.Context, sessionID, holder string, token int64, ttl time.Duration) (Lease, error)
	// Release gives the lease up; releasing a lease not held is not an error.
	Release(ctx context.Context, sessionID, holder string, token int64) error
	// Check says whether token is the current, unexpired lease.
	Check(ctx context.Context, sessionID string, token int64) error
}

type session struct {
	cur     *Lease
	queue   []*waiter
	token   int64
	changed chan struct{}
}

type waiter struct{ holder string }

// Memory keeps leases in this process.
type Memory struct {
	mu       sync.Mutex
	sessions map[string]*session
	now      func() time.Time
}

// NewMemory returns an empty lease table; now is the clock (nil: time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{sessions: map[string]*session{}, now: now}
}

func (m *Memory) session(id string) *session {
	s := m.sessions[id]
	if s == nil {
		s = &session{changed: make(chan struct{})}
		m.sessions[id] = s
	}
	return s
}

// wake tells every waiter of s to look again.
func (s *session) wake() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (m *Memory) expired(s *session) bool {
	return s.cur == nil || !m.now().Before(s.cur.Expires)
}

// Acquire implements Manager.
func (m *Memory) Acquire(ctx context.Context, sessionID, holder string, ttl time.Duration) (Lease, error) {
	if sessionID == "" || holder == "" {
		return Lease{}, ErrInvalid
	}
	ttl = normTTL(ttl)
	m.mu.Lock()
	s := m.session(sessionID)
	if s.cur != nil && s.cur.Holder == holder && !m.expired(s) {
		s.cur.Expires = m.now().Add(ttl)
		l := *s.cur
		m.mu.Unlock()
		return l, nil
	}
	w := &waiter{holder: holder}
	s.queue = append(s.queue, w)
	for {
		if s.queue[0] == w && m.expired(s) {
			s.queue = s.queue[1:]
			s.token++
			s.cur = &Lease{SessionID: sessionID, Holder: holder, Token: s.token, Expires: m.now().Add(ttl)}
			l := *s.cur
			s.wake()
			m.mu.Unlock()
			return l, nil
		}
		ch := s.changed
		var timer <-chan time.Time
		if s.queue[0] == w && s.cur != nil {
			t := time.NewTimer(s.cur.Expires.Sub(m.now()) + time.Millisecond)
			defer t.Stop()
			timer = t.C
		}
		m.mu.Unlock()
		select {
		case <-ch:
		case <-timer:
		case <-ctx.Done():
			m.mu.Lock()
			for i, q := range s.queue {
				if q == w {
					s.queue = append(s.queue[:i], s.queue[i+1:]...)
					break
				}
			}
			s.wake()
			m.mu.Unlock()
			return Lease{}, fmt.Errorf("waiting for the input lease of %s: %w", sessionID, ctx.Err())
		}
		m.mu.Lock()
	}
}

// Renew implements Manager.
func (m *Memory) Renew(_ context.Context, sessionID, holder string, token int64, ttl time.Duration) (Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessionID]
	if s == nil || m.expired(s) || s.cur.Holder != holder || s.cur.Token != token {
		return Lease{}, fmt.Errorf("renew input lease %d of %s: %w", token, sessionID, ErrNotHolder)
	}
	s.cur.Expires = m.now().Add(normTTL(ttl))
	return *s.cur, nil
}

// Release implements Manager.
func (m *Memory) Release(_ context.Context, sessionID, holder string, token int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessionID]
	if s == nil || s.cur == nil || s.cur.Holder != holder || s.cur.Token != token {
		return nil
	}
	s.cur = nil
	s.wake()
	if len(s.queue) == 0 {
		// The token counter must survive: a new grant has to beat every
		// token the display has seen. Keep the entry, drop only the lease.
		s.cur = nil
	}
	return nil
}

// Check implements Manager.
func (m *Memory) Check(_ context.Context, sessionID string, token int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessionID]
	if s == nil || m.expired(s) || s.cur.Token != token {
		return fmt.Errorf("input lease %d of %s: %w", token, sessionID, ErrNotHolder)
	}
	return nil
}

func normTTL(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return 30 * time.Second
	}
	return ttl
}
