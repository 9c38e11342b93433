// Package placement chooses the node a session runs on and accounts for the
// capacity it takes.
//
// Placer is what the session service calls. Local is the one-machine placer
// of the all-in-one mode; a distributed placer (scores live nodes from a
// registry, reserves atomically) implements the same interface.
package placement

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

var (
	// ErrNoCapacity: every node that fits is full.
	ErrNoCapacity = errors.New("no node has capacity for another session")
	// ErrNoMatchingNode: no node carries the requested labels.
	ErrNoMatchingNode = errors.New("no node matches the node selector")
	// ErrUnavailable: where nodes are registered cannot be reached now;
	// retrying later may succeed.
	ErrUnavailable = errors.New("node registry unavailable")
)

// Outcome names a placement's result for deskgrid_placement_decisions_total:
// placed, no_capacity, no_matching_node, cancelled (the caller gave up) or
// unavailable (anything else: the registry could not be reached).
func Outcome(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return "placed"
	case errors.Is(err, ErrNoCapacity):
		return "no_capacity"
	case errors.Is(err, ErrNoMatchingNode):
		return "no_matching_node"
	case ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	}
	return "unavailable"
}

// Resources a session asks for; zero means the node default.
type Resources struct {
	MemoryBytes int64
	CPUMillis   int64
	DiskBytes   int64
}

// Request describes the session to place.
type Request struct {
	SessionID string
	Tenant    string
	// NodeSelector: labels the chosen node must carry, all of them.
	NodeSelector map[string]string
	Resources    Resources
	// Exclude names nodes not to use: a create re-placed after its first
	// node failed before the session started.
	Exclude []string
	// Image names the session's image as nodes report the images they hold
	// (ImageKeys): a node holding any of these need not pull it, and is
	// preferred. Empty: the session runs no image.
	Image []string
}

// Node is where a session was placed.
type Node struct {
	ID string
	// Address the node's display and sandbox services listen on.
	Address string
}

// Placer places sessions on nodes and releases their reservations.
type Placer interface {
	// Place reserves room for the session on a node. Placing a session that
	// already holds a reservation returns the same node.
	Place(ctx context.Context, req Request) (Node, error)
	// Release frees the session's reservation; releasing one that is not
	// held succeeds.
	Release(ctx context.Context, nodeID, sessionID string) error
}

// Local places every session on one node, up to a fixed number at once.
type Local struct {
	node     Node
	labels   map[string]string
	capacity int

	mu       sync.Mutex
	sessions map[string]struct{}
	draining bool
}

// LocalOption configures a Local placer.
type LocalOption func(*Local)

// WithLabels gives the node labels that node selectors are matched against;
// without them only sessions with an empty selector fit.
func WithLabels(labels map[string]string) LocalOption {
	return func(l *Local) { l.labels = maps.Clone(labels) }
}

// NewLocal returns a placer for one node that holds at most capacity
// sessions (no limit when capacity <= 0).
func NewLocal(node Node, capacity int, opts ...LocalOption) *Local {
	l := &Local{node: node, capacity: capacity, sessions: map[string]struct{}{}}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Place implements Placer.
func (l *Local) Place(ctx context.Context, req Request) (n Node, err error) {
	defer func() { metrics.PlacementDecided(ctx, Outcome(ctx, err)) }()
	if err := ctx.Err(); err != nil {
		return Node{}, err
	}
	if !Matches(l.labels, req.NodeSelector) {
		return Node{}, fmt.Errorf("node %s: %w %v", l.node.ID, ErrNoMatchingNode, req.NodeSelector)
	}
	if slices.Contains(req.Exclude, l.node.ID) {
		return Node{}, fmt.Errorf("node %s failed and there is no other: %w", l.node.ID, ErrUnavailable)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.sessions[req.SessionID]; ok {
		return l.node, nil
	}
	if l.draining {
		return Node{}, fmt.Errorf("node %s is draining (undrain it to take new sessions): %w", l.node.ID, ErrNoCapacity)
	}
	if l.capacity > 0 && len(l.sessions) >= l.capacity {
		return Node{}, fmt.Errorf("node %s holds %d sessions: %w", l.node.ID, l.capacity, ErrNoCapacity)
	}
	l.sessions[req.SessionID] = struct{}{}
	return l.node, nil
}

// Release implements Placer.
func (l *Local) Release(_ context.Context, nodeID, sessionID string) error {
	if nodeID != l.node.ID {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.sessions, sessionID)
	return nil
}

// Restore re-reserves room for sessions that are already placed on the node,
// such as those a previous process started and that still run.
func (l *Local) Restore(sessionIDs ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range sessionIDs {
		l.sessions[id] = struct{}{}
	}
}

// Used is how many sessions hold a reservation.
func (l *Local) Used() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sessions)
}

// SetDraining stops (or resumes) placing new sessions on the node; the
// sessions it holds keep running.
func (l *Local) SetDraining(draining bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.draining = draining
}

// State is the node as the node API shows it: always alive (it is this
// process's own), its capacity in sessions and what is reserved of it.
func (l *Local) State() NodeState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return NodeState{
		ID: l.node.ID, Address: l.node.Address, Labels: maps.Clone(l.labels),
		Capacity: Capacity{Sessions: int64(max(l.capacity, 0))},
		Used:     Capacity{Sessions: int64(len(l.sessions))},
		Alive:    true, Draining: l.draining,
	}
}

// Matches reports whether a node with labels satisfies selector.
func Matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
