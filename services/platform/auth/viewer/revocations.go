package viewer

import (
	"context"
	"sync"
	"time"
)

// Memory keeps revocations in this process. Entries go when their token
// would have expired, so it holds at most the tokens revoked within the
// longest TTL.
type Memory struct {
	mu      sync.Mutex
	revoked map[string]time.Time
	now     func() time.Time
	sweepAt int
}

// NewMemory returns an empty in-process revocation set.
func NewMemory() *Memory { return NewMemoryWithClock(time.Now) }

// NewMemoryWithClock is NewMemory with a clock, for tests.
func NewMemoryWithClock(now func() time.Time) *Memory {
	return &Memory{revoked: map[string]time.Time{}, now: now, sweepAt: 64}
}

// Revoke implements Revocations.
func (m *Memory) Revoke(_ context.Context, tokenID string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.revoked[tokenID]; !ok || until.After(old) {
		m.revoked[tokenID] = until
	}
	// Sweep when the set has doubled since the last sweep: amortised O(1).
	if len(m.revoked) >= m.sweepAt {
		now := m.now()
		for id, exp := range m.revoked {
			if !now.Before(exp) {
				delete(m.revoked, id)
			}
		}
		m.sweepAt = max(64, 2*len(m.revoked))
	}
	return nil
}

// IsRevoked implements Revocations.
func (m *Memory) IsRevoked(_ context.Context, tokenID string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	exp, ok := m.revoked[tokenID]
	return ok && m.now().Before(exp), nil
}

// Len is how many revocations are held.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.revoked)
}
