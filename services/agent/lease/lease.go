// Package lease grants the input lease of a session: one holder at a time
// may send input to the display, waiters are served first come first
// served, and every grant carries a larger fencing token so the display can
// refuse a holder whose lease has passed on.
//
// A grant has two names: its fencing token, a number that only grows and
// that the display sees, and its id, 128 random bits that only the caller
// who acquired it is told; renewing and releasing need the id.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lease is a grant of a session's input.
type Lease struct {
	SessionID string
	Holder    string
	// ID is the grant's secret: renew and release name the lease by it.
	ID string
	// Token is the fencing token: larger than every token granted before
	// for the session.
	Token   int64
	Expires time.Time
}

var (
	// ErrNotHolder: the lease named is not held (it expired, was released
	// or passed to another holder).
	ErrNotHolder = errors.New("input lease not held")
	// ErrInvalid: a request without session or holder.
	ErrInvalid = errors.New("input lease needs a session and a holder")
)

// Manager grants input leases. Memory is the single-process one; Redis
// keeps the same contract for every replica of a cluster.
type Manager interface {
	// Acquire waits in FIFO order until holder has the lease, or ctx ends.
	// Every call is a new request: a holder name is a label, not a proof.
	Acquire(ctx context.Context, sessionID, holder string, ttl time.Duration) (Lease, error)
	// Renew extends the lease named by id if it is still held.
	Renew(ctx context.Context, sessionID, id string, ttl time.Duration) (Lease, error)
	// Release gives the lease named by id up; releasing a lease not held
	// is not an error.
	Release(ctx context.Context, sessionID, id string) error
	// Status tells who holds the lease now and how many acquires wait for
	// it. An expired lease is not held.
	Status(ctx context.Context, sessionID string) (Status, error)
}

// Status is a session's lease as it is now.
type Status struct {
	// Held: Lease is the current grant (with its ID: the caller decides
	// whom to tell it).
	Held  bool
	Lease Lease
	// Waiting is the number of acquires waiting in the queue.
	Waiting int
}

// newID returns a grant id: 128 random bits.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
	w := &waiter{holder: holder}
	s.queue = append(s.queue, w)
	for {
		if s.queue[0] == w && m.expired(s) {
			s.queue = s.queue[1:]
			s.token++
			s.cur = &Lease{SessionID: sessionID, Holder: holder, ID: newID(), Token: s.token, Expires: m.now().Add(ttl)}
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
func (m *Memory) Renew(_ context.Context, sessionID, id string, ttl time.Duration) (Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessionID]
	if s == nil || m.expired(s) || id == "" || s.cur.ID != id {
		return Lease{}, fmt.Errorf("renew input lease of %s: %w", sessionID, ErrNotHolder)
	}
	s.cur.Expires = m.now().Add(normTTL(ttl))
	return *s.cur, nil
}

// Release implements Manager.
func (m *Memory) Release(_ context.Context, sessionID, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessionID]
	if s == nil || s.cur == nil || id == "" || s.cur.ID != id {
		return nil
	}
	// The entry stays with its token counter: a new grant has to beat
	// every token the display has seen.
	s.cur = nil
	s.wake()
	return nil
}

// Status implements Manager.
func (m *Memory) Status(_ context.Context, sessionID string) (Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessionID]
	if s == nil {
		return Status{}, nil
	}
	st := Status{Waiting: len(s.queue)}
	if !m.expired(s) {
		st.Held, st.Lease = true, *s.cur
	}
	return st, nil
}

func normTTL(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return 30 * time.Second
	}
	return ttl
}
