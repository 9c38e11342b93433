// Package store keeps session records in SQL: SQLite for one machine,
// PostgreSQL for a cluster. Both run the same queries and the same test suite.
//
// A record is the full session proto plus the columns needed to filter, order
// and reap. Every write checks the generation it read (optimistic concurrency),
// so replicas and concurrent calls never overwrite each other's changes.
package store

import (
	"context"
	"errors"
	"time"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

var (
	// ErrNotFound: no session has that id (or request id).
	ErrNotFound = errors.New("session not found")
	// ErrConflict: the session changed since it was read.
	ErrConflict = errors.New("session changed concurrently")
	// ErrAlreadyExists: a session with that id, or that tenant's request id, exists.
	ErrAlreadyExists = errors.New("session already exists")
	// ErrInvalidPageToken: the page token is malformed or was made for other filters.
	ErrInvalidPageToken = errors.New("invalid page token")
)

// DefaultPageSize is used when a Filter's PageSize is zero.
const DefaultPageSize = 100

// Filter selects sessions for List.
type Filter struct {
	// Tenant limits the list to one tenant; empty means every tenant.
	Tenant string
	// States limits the list to these states; empty means every state.
	States []sessionv1.SessionState
	// Labels the sessions must all carry.
	Labels map[string]string
	// NodeID limits the list to one node; empty means every node.
	NodeID string
	// PageSize is the most sessions returned; 0 means DefaultPageSize.
	PageSize int
	// PageToken continues a previous List with the same filters.
	PageToken string
}

// Store holds session records.
type Store interface {
	// Create inserts a new session. requestID, when not empty, must be unique
	// within the session's tenant. ErrAlreadyExists otherwise.
	Create(ctx context.Context, s *sessionv1.Session, requestID string) error
	// Get returns a session by id, or ErrNotFound.
	Get(ctx context.Context, id string) (*sessionv1.Session, error)
	// Update replaces a session if its stored generation is still
	// expectGeneration; ErrConflict if it changed, ErrNotFound if it is gone.
	// Labels are fixed at creation and not rewritten.
	Update(ctx context.Context, s *sessionv1.Session, expectGeneration int64) error
	// List pages through sessions newest first (create_time, then id,
	// descending) and returns the token of the next page ("" on the last).
	List(ctx context.Context, f Filter) ([]*sessionv1.Session, string, error)
	// FindByRequestID returns the session a tenant created with requestID.
	FindByRequestID(ctx context.Context, tenant, requestID string) (*sessionv1.Session, error)
	// ForgetFailedRequest detaches requestID from session id if that
	// session FAILED, so a retry of the request makes a new session. It
	// reports whether it did; false means another retry did first or the
	// session is not (or no longer) a failed one of that request.
	ForgetFailedRequest(ctx context.Context, tenant, requestID, id string) (bool, error)
	// ListExpired returns up to limit sessions to reap at now: RUNNING or
	// SUSPENDED ones past their expire_time, and RUNNING ones idle past
	// last_active_time + idle_timeout.
	ListExpired(ctx context.Context, now time.Time, limit int) ([]*sessionv1.Session, error)
	// ListStale returns up to limit sessions in one of states whose last
	// update is older than before: work a process began and never finished.
	ListStale(ctx context.Context, states []sessionv1.SessionState, before time.Time, limit int) ([]*sessionv1.Session, error)
	// ListActive returns every session that holds, or is getting, resources
	// on nodeID (every node when empty).
	ListActive(ctx context.Context, nodeID string) ([]*sessionv1.Session, error)
	// Close releases the database.
	Close() error
}
