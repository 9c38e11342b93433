// Package store keeps agent runs: the run record and its conversation, so
// a run can be read back and continued after a restart.
package store

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
)

var (
	// ErrNotFound: no run has that id.
	ErrNotFound = errors.New("run not found")
	// ErrInvalidPageToken: the page token is malformed.
	ErrInvalidPageToken = errors.New("invalid page token")
)

// Store holds runs.
type Store interface {
	// Create inserts a run.
	Create(ctx context.Context, r *agentv1.Run) error
	// Update replaces a run's record.
	Update(ctx context.Context, r *agentv1.Run) error
	// Get returns a run, or ErrNotFound.
	Get(ctx context.Context, id string) (*agentv1.Run, error)
	// List pages through a session's runs, newest first.
	List(ctx context.Context, sessionID string, pageSize int, pageToken string) ([]*agentv1.Run, string, error)
	// SaveConversation stores a run's conversation (opaque JSON).
	SaveConversation(ctx context.Context, id string, conv []byte) error
	// Conversation returns what SaveConversation stored, nil if nothing.
	Conversation(ctx context.Context, id string) ([]byte, error)
	Close() error
}

// Memory is a Store in this process, for tests and ephemeral use.
type Memory struct {
	mu    sync.Mutex
	runs  map[string]*agentv1.Run
	convs map[string][]byte
	order []string
}

// NewMemory returns an empty store.
func NewMemory() *Memory { return &Memory{runs: map[string]*agentv1.Run{}, convs: map[string][]byte{}} }

func (m *Memory) Create(_ context.Context, r *agentv1.Run) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs[r.GetId()] = proto.Clone(r).(*agentv1.Run)
	m.order = append(m.order, r.GetId())
	return nil
}

func (m *Memory) Update(_ context.Context, r *agentv1.Run) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.runs[r.GetId()]; !ok {
		return ErrNotFound
	}
	m.runs[r.GetId()] = proto.Clone(r).(*agentv1.Run)
	return nil
}

func (m *Memory) Get(_ context.Context, id string) (*agentv1.Run, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[id]
	if !ok {
		return nil, ErrNotFound
	}
	return proto.Clone(r).(*agentv1.Run), nil
}

func (m *Memory) List(_ context.Context, sessionID string, pageSize int, pageToken string) ([]*agentv1.Run, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	off := 0
	if pageToken != "" {
		n, err := strconv.Atoi(pageToken)
		if err != nil || n < 0 {
			return nil, "", ErrInvalidPageToken
		}
		off = n
	}
	if pageSize <= 0 {
		pageSize = 100
	}
	var all []*agentv1.Run
	for i := len(m.order) - 1; i >= 0; i-- {
		if r := m.runs[m.order[i]]; r.GetSessionId() == sessionID {
			all = append(all, r)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].GetCreateTime().AsTime().After(all[j].GetCreateTime().AsTime()) })
	if off >= len(all) {
		return nil, "", nil
	}
	end := min(off+pageSize, len(all))
	out := make([]*agentv1.Run, 0, end-off)
	for _, r := range all[off:end] {
		out = append(out, proto.Clone(r).(*agentv1.Run))
	}
	next := ""
	if end < len(all) {
		next = strconv.Itoa(end)
	}
	return out, next, nil
}

func (m *Memory) SaveConversation(_ context.Context, id string, conv []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.convs[id] = append([]byte(nil), conv...)
	return nil
}

func (m *Memory) Conversation(_ context.Context, id string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.convs[id], nil
}

func (m *Memory) Close() error { return nil }
