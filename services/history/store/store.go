// Package store keeps history entries in SQL: SQLite for one machine,
// PostgreSQL for a cluster. Both share the queries; only placeholders, the
// time column and migrations differ.
package store

import (
	"context"
	"errors"
	"time"
)

// Page sizes a query accepts.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

var (
	// ErrInvalidQuery is returned for a query that cannot be run, such as one
	// without a session.
	ErrInvalidQuery = errors.New("store: invalid query")
	// ErrInvalidPageToken is returned for a page token that is malformed or
	// was issued for another query.
	ErrInvalidPageToken = errors.New("store: invalid page token")
)

// Entry is one recorded event.
type Entry struct {
	// ID is the event id; an entry with an id already stored is dropped.
	ID        string
	SessionID string
	RunID     string
	// Sequence is the JetStream stream sequence of the event: it only grows,
	// so it orders a session's entries.
	Sequence int64
	Type     string
	Time     time.Time
	Tenant   string
	// Data is the payload as JSON text; empty when the event had none.
	Data string
}

// Query selects a page of one session's entries in sequence order.
type Query struct {
	SessionID string
	// Types keeps only entries of these types; empty keeps all.
	Types []string
	// AfterSequence keeps only entries with a larger sequence.
	AfterSequence int64
	// PageSize is the most entries returned: 0 means DefaultPageSize, and
	// it is capped at MaxPageSize.
	PageSize int
	// PageToken continues from the page that returned it.
	PageToken string
}

// Store is the durable log of entries.
type Store interface {
	// Append stores entries in one transaction and returns how many were new;
	// entries whose id is already stored are skipped, so a redelivered batch
	// is harmless.
	Append(ctx context.Context, entries []Entry) (inserted int, err error)
	// List returns a page of entries and the token of the next page, empty
	// after the last one.
	List(ctx context.Context, q Query) (entries []Entry, nextPageToken string, err error)
	Close() error
}
