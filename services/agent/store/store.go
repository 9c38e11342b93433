// Package store keeps agent runs: the run record, its conversation and how
// it reaches its provider, so a run can be read back and continued after a
// restart. Memory keeps them in the process; SQL in SQLite or PostgreSQL.
package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
)

var (
	// ErrNotFound: no run has that id.
	ErrNotFound = errors.New("run not found")
	// ErrExists: a run with that id is already stored.
	ErrExists = errors.New("run already exists")
	// ErrInvalidPageToken: the page token is malformed.
	ErrInvalidPageToken = errors.New("invalid page token")
)

// Access is how a run reaches its provider. It is kept beside the record
// and never leaves the service.
type Access struct {
	BaseURL string
	// OwnKey: the run brought its own API key (rather than the service's).
	OwnKey bool
	// SealedKey is that key encrypted (secretbox, bound to the run id); nil when the
	// key is kept only in memory.
	SealedKey []byte
}

// Store holds runs.
type Store interface {
	// Create inserts a run; its tenant is r.Tenant.
	Create(ctx context.Context, r *agentv1.Run, a Access) error
	// Update replaces a run's record.
	Update(ctx context.Context, r *agentv1.Run) error
	// Get returns a run, or ErrNotFound.
	Get(ctx context.Context, id string) (*agentv1.Run, error)
	// List pages through a tenant's runs on a session, newest first.
	List(ctx context.Context, tenant, sessionID string, pageSize int, pageToken string) ([]*agentv1.Run, string, error)
	// SaveConversation stores a run's conversation (opaque JSON).
	SaveConversation(ctx context.Context, id string, conv []byte) error
	// Conversation returns what SaveConversation stored, nil if nothing.
	Conversation(ctx context.Context, id string) ([]byte, error)
	// Access returns what Create stored about the run's provider access.
	Access(ctx context.Context, id string) (Access, error)
	// Unfinished returns the runs not in a final state (of every tenant).
	Unfinished(ctx context.Context) ([]*agentv1.Run, error)
	Close() error
}

// Final says whether a run in st is done.
func Final(st agentv1.RunState) bool {
	return st == agentv1.RunState_RUN_STATE_SUCCEEDED || st == agentv1.RunState_RUN_STATE_FAILED || st == agentv1.RunState_RUN_STATE_CANCELLED
}

// DefaultPageSize is the page size when a List asks for none.
const DefaultPageSize = 100

// pageToken is the position after the last run of a page.
func pageToken(createNanos int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(createNanos, 10) + "/" + id))
}

func parsePageToken(tok string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, "", ErrInvalidPageToken
	}
	ts, id, ok := strings.Cut(string(b), "/")
	n, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil || id == "" {
		return 0, "", ErrInvalidPageToken
	}
	return n, id, nil
}

func createNanos(r *agentv1.Run) int64 { return r.GetCreateTime().AsTime().UnixNano() }

// Memory is a Store in this process, for tests and ephemeral use.
type Memory struct {
	mu     sync.Mutex
	runs   map[string]*agentv1.Run
	convs  map[string][]byte
	access map[string]Access
}

// NewMemory returns an empty store.
func NewMemory() *Memory {
	return &Memory{runs: map[string]*agentv1.Run{}, convs: map[string][]byte{}, access: map[string]Access{}}
}

func (m *Memory) Create(_ context.Context, r *agentv1.Run, a Access) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.runs[r.GetId()]; ok {
		return fmt.Errorf("%w: %s", ErrExists, r.GetId())
	}
	m.runs[r.GetId()] = proto.Clone(r).(*agentv1.Run)
	a.SealedKey = append([]byte(nil), a.SealedKey...)
	m.access[r.GetId()] = a
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

func (m *Memory) List(_ context.Context, tenant, sessionID string, pageSize int, tok string) ([]*agentv1.Run, string, error) {
	var afterNanos int64
	var afterID string
	if tok != "" {
		var err error
		if afterNanos, afterID, err = parsePageToken(tok); err != nil {
			return nil, "", err
		}
	}
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var all []*agentv1.Run
	for _, r := range m.runs {
		if r.GetTenant() != tenant || r.GetSessionId() != sessionID {
			continue
		}
		if tok != "" {
			n := createNanos(r)
			if n > afterNanos || (n == afterNanos && r.GetId() >= afterID) {
				continue
			}
		}
		all = append(all, r)
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := createNanos(all[i]), createNanos(all[j])
		if a != b {
			return a > b
		}
		return all[i].GetId() > all[j].GetId()
	})
	next := ""
	if len(all) > pageSize {
		all = all[:pageSize]
		last := all[pageSize-1]
		next = pageToken(createNanos(last), last.GetId())
	}
	out := make([]*agentv1.Run, len(all))
	for i, r := range all {
		out[i] = proto.Clone(r).(*agentv1.Run)
	}
	return out, next, nil
}

func (m *Memory) SaveConversation(_ context.Context, id string, conv []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.runs[id]; !ok {
		return ErrNotFound
	}
	m.convs[id] = append([]byte(nil), conv...)
	return nil
}

func (m *Memory) Conversation(_ context.Context, id string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.runs[id]; !ok {
		return nil, ErrNotFound
	}
	return append([]byte(nil), m.convs[id]...), nil
}

func (m *Memory) Access(_ context.Context, id string) (Access, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.access[id]
	if !ok {
		return Access{}, ErrNotFound
	}
	a.SealedKey = append([]byte(nil), a.SealedKey...)
	return a, nil
}

func (m *Memory) Unfinished(context.Context) ([]*agentv1.Run, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*agentv1.Run
	for _, r := range m.runs {
		if !Final(r.GetState()) {
			out = append(out, proto.Clone(r).(*agentv1.Run))
		}
	}
	return out, nil
}

func (m *Memory) Close() error { return nil }
