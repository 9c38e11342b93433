// Package auth authenticates callers of deskgrid's APIs and says who they
// are: API keys ("dg_<id>_<secret>") checked by a Verifier, the internal
// token services use between themselves, gRPC interceptors and HTTP
// middleware that put the resulting Principal in the request context, and
// the per-method scope table. Tenants and keys are stored by package
// keystore; viewer links, secrets at rest, rate limits and quotas live in
// the sibling packages viewer, secretbox, ratelimit and quota.
package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Scope is what a key may do. Scopes nest: write includes read, admin
// includes write and read, so a key needs only its highest scope.
type Scope string

// The scopes a key can hold.
const (
	ScopeRead  Scope = "read"
	ScopeWrite Scope = "write"
	ScopeAdmin Scope = "admin"
)

func (s Scope) rank() int {
	switch s {
	case ScopeRead:
		return 1
	case ScopeWrite:
		return 2
	case ScopeAdmin:
		return 3
	}
	return 0
}

// Valid reports whether s is one of the known scopes.
func (s Scope) Valid() bool { return s.rank() > 0 }

// Scopes is the set of scopes a key holds.
type Scopes []Scope

// Has reports whether the set grants want (directly or through a higher
// scope).
func (ss Scopes) Has(want Scope) bool {
	if !want.Valid() {
		return false
	}
	for _, s := range ss {
		if s.rank() >= want.rank() {
			return true
		}
	}
	return false
}

// String is the stored form: scopes sorted and comma-separated.
func (ss Scopes) String() string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, ",")
}

// ParseScopes reads a comma-separated list ("read,write"), refusing
// unknown names; the result is sorted and without duplicates.
func ParseScopes(s string) (Scopes, error) {
	var out Scopes
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		sc := Scope(strings.ToLower(part))
		if !sc.Valid() {
			return nil, fmt.Errorf("unknown scope %q (want read, write or admin)", part)
		}
		out = append(out, sc)
	}
	return NormalizeScopes(out)
}

// NormalizeScopes checks every scope and returns them ordered read, write,
// admin without duplicates; an empty set is an error.
func NormalizeScopes(ss Scopes) (Scopes, error) {
	if len(ss) == 0 {
		return nil, fmt.Errorf("a key needs at least one scope (read, write or admin)")
	}
	out := make(Scopes, 0, len(ss))
	for _, s := range ss {
		if !s.Valid() {
			return nil, fmt.Errorf("unknown scope %q (want read, write or admin)", s)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Scope) int { return a.rank() - b.rank() })
	return out, nil
}

// SystemKeyID names the internal-token principal in logs.
const SystemKeyID = "system"

// Principal is an authenticated caller.
type Principal struct {
	// Tenant the caller acts for. For the system principal it is the tenant
	// forwarded in the deskgrid-tenant metadata, or "" when none was.
	Tenant string
	// KeyID is the API key's id, or SystemKeyID.
	KeyID  string
	Scopes Scopes
	// System marks the internal token: another deskgrid service, trusted to
	// act for any tenant.
	System bool
}

// Can reports whether the principal holds scope want.
func (p Principal) Can(want Scope) bool { return p.System || p.Scopes.Has(want) }

type principalKey struct{}

// WithPrincipal returns ctx carrying p; the interceptors and middleware do
// this, tests and in-process callers may too.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the caller authenticated for this request.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// TenantOf is the tenant the request acts for, "" when the request was not
// authenticated or is a system call not acting for any tenant (what the
// internal credentials forward). Who a request may see is CallerOf's.
func TenantOf(ctx context.Context) string {
	p, _ := FromContext(ctx)
	return p.Tenant
}
