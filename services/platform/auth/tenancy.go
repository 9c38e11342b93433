package auth

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind is what a caller is, as far as tenancy goes. The services that own
// tenants' resources (session, agent, display, sandbox, history) ask
// Tenancy for it; this file is the one rule of who sees what.
type Kind int

const (
	// Anonymous: auth is on and no principal was authenticated (an open
	// method, or a call that reached a service past the interceptors). It
	// sees nothing, not even what belongs to no tenant, and may not make
	// or query anything. It is the zero Kind, so a Caller nobody filled in
	// is denied.
	Anonymous Kind = iota
	// AuthOff: auth is off, every caller is one trust
	// domain and sees everything.
	AuthOff
	// SystemCaller: another deskgrid service with the internal token,
	// acting for no tenant; it sees everything.
	SystemCaller
	// TenantCaller: an API key's tenant, or the system acting for the
	// tenant it forwarded.
	TenantCaller
)

func (k Kind) String() string {
	switch k {
	case AuthOff:
		return "auth off"
	case SystemCaller:
		return "system"
	case TenantCaller:
		return "tenant"
	}
	return "anonymous"
}

// Caller is who a request acts for.
type Caller struct {
	Kind Kind
	// Tenant is set for TenantCaller only.
	Tenant string
}

// The callers that are not a tenant.
var (
	// Unrestricted is every caller when auth is off.
	Unrestricted = Caller{Kind: AuthOff}
	// System is the internal token acting for no tenant.
	System = Caller{Kind: SystemCaller}
)

// ForTenant is a caller acting for tenant; "" is Anonymous, never the
// system.
func ForTenant(tenant string) Caller {
	if tenant == "" {
		return Caller{Kind: Anonymous}
	}
	return Caller{Kind: TenantCaller, Tenant: tenant}
}

// AsSystem returns ctx acting as the system for no tenant, for work a node
// starts on its own (a warm pool, a reaper), never for a request's.
func AsSystem(ctx context.Context) context.Context {
	return WithPrincipal(ctx, Principal{KeyID: SystemKeyID, System: true})
}

// ErrAnonymous answers a call that must act for a tenant, or as the
// system, and acts for neither.
var ErrAnonymous = status.Error(codes.Unauthenticated, "this call carries no credentials: send an API key (Authorization: Bearer dg_...)")

// CallerOf is who the request in ctx acts for on a server with auth on:
// the tenant of its principal, the system for the internal token with no
// tenant forwarded, Anonymous when no principal was authenticated.
func CallerOf(ctx context.Context) Caller {
	p, ok := FromContext(ctx)
	switch {
	case !ok:
		return Caller{Kind: Anonymous}
	case p.Tenant != "":
		return ForTenant(p.Tenant)
	case p.System:
		return System
	}
	// A key always belongs to a tenant; one that does not is denied.
	return Caller{Kind: Anonymous}
}

// Sees reports whether c may see what owner owns ("" owner: made with auth
// off or by the system for no tenant, which every authenticated caller
// sees).
func (c Caller) Sees(owner string) bool {
	switch c.Kind {
	case AuthOff, SystemCaller:
		return true
	case TenantCaller:
		return owner == "" || owner == c.Tenant
	}
	return false
}

// Scope is the tenant the caller's reads are confined to and its creations
// owned by: "" for every tenant (auth off, the system), ErrAnonymous for an
// anonymous caller, who may act for none.
func (c Caller) Scope() (string, error) {
	switch c.Kind {
	case AuthOff, SystemCaller:
		return "", nil
	case TenantCaller:
		return c.Tenant, nil
	}
	return "", ErrAnonymous
}

// DefaultTenant owns what the control plane records (sessions, runs) with
// auth off. The first API key is made for it, so turning auth on later
// keeps those records to that key's tenant.
const DefaultTenant = "default"

// Owner is the tenant recorded on what the caller creates in a service
// that keeps records (session, agent): its Scope, but DefaultTenant with
// auth off.
func (c Caller) Owner() (string, error) {
	if c.Kind == AuthOff {
		return DefaultTenant, nil
	}
	return c.Scope()
}

// Tenancy says who a request acts for: a service's Deps.Tenancy. Nil is
// auth off (every caller Unrestricted); with auth on it is CallerOf.
type Tenancy func(ctx context.Context) Caller

// Caller is who ctx's request acts for.
func (t Tenancy) Caller(ctx context.Context) Caller {
	if t == nil {
		return Unrestricted
	}
	return t(ctx)
}

// Sees reports whether ctx's caller may see what owner owns.
func (t Tenancy) Sees(ctx context.Context, owner string) bool {
	return t.Caller(ctx).Sees(owner)
}

// Scope is ctx's caller's Scope.
func (t Tenancy) Scope(ctx context.Context) (string, error) {
	return t.Caller(ctx).Scope()
}

// Owner is ctx's caller's Owner.
func (t Tenancy) Owner(ctx context.Context) (string, error) {
	return t.Caller(ctx).Owner()
}
