// Package store keeps history entries in SQL: SQLite for one machine,
// PostgreSQL for a cluster. Both share the queries; only placeholders, the
// time column, full-text search and migrations differ.
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
	// ErrNotFound is returned when the session or run of a query has no
	// entry at all.
	ErrNotFound = errors.New("store: not found")
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
	// Kind is derived from Type by KindOf when Append is given none.
	Kind   Kind
	Time   time.Time
	Tenant string
	// Data is the payload as JSON text; empty when the event had none.
	Data string
	// Text is what full-text search finds the entry by; it is stored but not
	// read back, being derived from Data.
	Text string
	// BlobHash names a blob the entry refers to, such as a screenshot.
	BlobHash string
}

// Query selects a page of one session's or one run's entries in sequence
// order.
type Query struct {
	// Exactly one of SessionID and RunID.
	SessionID string
	RunID     string
	// Tenant, when set, keeps only that tenant's entries: a session or run
	// with none of them is ErrNotFound, as one with no entry at all.
	Tenant string
	// Types keeps only entries of these types; empty keeps all.
	Types []string
	// Kinds keeps only entries of these kinds; empty keeps all.
	Kinds []Kind
	// AfterSequence keeps only entries with a larger sequence.
	AfterSequence int64
	// Since and Until, when not zero, keep entries with Since <= Time < Until.
	Since, Until time.Time
	// PageSize is the most entries returned: 0 means DefaultPageSize, and
	// it is capped at MaxPageSize.
	PageSize int
	// PageToken continues from the page that returned it.
	PageToken string
}

// SearchQuery selects a page of entries whose text holds every word of Text,
// newest first.
type SearchQuery struct {
	Text string
	// Tenant and SessionID, when set, narrow the search.
	Tenant    string
	SessionID string
	PageSize  int
	PageToken string
}

// TenantUsage is how many entries a tenant holds.
type TenantUsage struct {
	Tenant  string
	Entries int64
}

// Store is the durable log of entries.
type Store interface {
	// Append stores entries in one transaction and returns how many were new;
	// entries whose id is already stored are skipped, so a redelivered batch
	// is harmless.
	Append(ctx context.Context, entries []Entry) (inserted int, err error)
	// Import appends entries of one session for tenant as Append does, in
	// one transaction with a check that the session holds no entry of
	// another tenant (nor one recorded without a tenant): if it does, the
	// session is not tenant's to write into, the answer is ErrNotFound and
	// nothing is stored. An empty tenant (a system call) skips the check.
	Import(ctx context.Context, tenant, sessionID string, entries []Entry) (inserted int, err error)
	// List returns a page of entries and the token of the next page, empty
	// after the last one. A first page of a session or run that has no entry
	// at all is ErrNotFound.
	List(ctx context.Context, q Query) (entries []Entry, nextPageToken string, err error)
	// Search returns a page of entries matching a full-text query.
	Search(ctx context.Context, q SearchQuery) (entries []Entry, nextPageToken string, err error)
	// DeleteSession deletes a session's entries of tenant (of every tenant
	// when tenant is empty) and returns how many.
	DeleteSession(ctx context.Context, tenant, sessionID string) (int64, error)
	// Tenants returns every tenant with entries and how many it has.
	Tenants(ctx context.Context) ([]TenantUsage, error)
	// DeleteBefore deletes at most limit of a tenant's entries older than
	// cutoff.
	DeleteBefore(ctx context.Context, tenant string, cutoff time.Time, limit int) (int64, error)
	// DeleteOldest deletes at most limit of a tenant's entries beyond its
	// newest keep.
	DeleteOldest(ctx context.Context, tenant string, keep int64, limit int) (int64, error)
	// BlobReferenced reports whether an entry of tenant (of any tenant when
	// tenant is empty) refers to the blob.
	BlobReferenced(ctx context.Context, tenant, hash string) (bool, error)
	Close() error
}
