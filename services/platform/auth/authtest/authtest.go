// Package authtest is the tenancy harness of the services' tests: two
// tenants, the callers that are no tenant (the system, an anonymous
// caller, auth off), and the checks every service's tenancy test makes
// (each RPC has a case, another tenant's target answers as a missing one).
//
// A test server without auth interceptors learns its caller from the
// TenantMD metadata a client sends (As); Tenancy reads it back.
package authtest

import (
	"context"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deskgrid/deskgrid/services/platform/auth"
)

// The two tenants of a tenancy test: Victim owns what the attacks aim at.
const (
	Victim   = "victim"
	Attacker = "attacker"
)

// TenantMD is the metadata header Tenancy reads, standing in for the
// authenticated principal.
const TenantMD = "x-tenant"

// Tenancy is a service's Deps.Tenancy on a test server without
// interceptors: the tenant named in the call's TenantMD, and the system
// (the internal token forwarding no tenant) for a call without it.
func Tenancy(ctx context.Context) auth.Caller {
	if t := Tenant(ctx); t != "" {
		return auth.ForTenant(t)
	}
	return auth.System
}

// Tenant is the tenant named in the call's TenantMD, "" when none is, for
// the services whose Deps.Tenant hook returns the tenant's name.
func Tenant(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, TenantMD); len(v) > 0 {
		return v[0]
	}
	return ""
}

// As returns ctx whose outgoing calls act for tenant.
func As(ctx context.Context, tenant string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, TenantMD, tenant)
}

// Incoming returns ctx as a handler sees a call for tenant, for a test that
// calls a service in process.
func Incoming(ctx context.Context, tenant string) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.Pairs(TenantMD, tenant))
}

// The Tenancy of the callers that are no tenant. A call with no TenantMD
// is the system under Tenancy; under AuthOn it is anonymous; under AuthOff
// every call sees everything.
var (
	// AuthOn is the production hook: a call that reached the service with
	// no principal (past the interceptors, as an in-process caller could)
	// is anonymous, one with auth.AsSystem the system.
	AuthOn auth.Tenancy = auth.CallerOf
	// AuthOff is a service with auth off: every caller is unrestricted.
	AuthOff auth.Tenancy
)

// Methods are the names of every RPC of a service, unary and streaming.
func Methods(sd grpc.ServiceDesc) []string {
	var out []string
	for _, m := range sd.Methods {
		out = append(out, m.MethodName)
	}
	for _, st := range sd.Streams {
		out = append(out, st.StreamName)
	}
	return out
}

// RequireCases fails the test for every RPC of sd that is in none of
// cases, so an RPC added to a service without a tenancy case fails.
func RequireCases(tb testing.TB, sd grpc.ServiceDesc, cases ...[]string) {
	tb.Helper()
	for _, m := range Methods(sd) {
		if !slices.ContainsFunc(cases, func(c []string) bool { return slices.Contains(c, m) }) {
			tb.Errorf("%s.%s has no tenancy case", sd.ServiceName, m)
		}
	}
}

// Names are the keys of a test's table of calls, sorted, with last moved
// to the end in the order given (deletes, so the calls before them meet
// what still exists).
func Names[V any](calls map[string]V, last ...string) []string {
	names := slices.Sorted(maps.Keys(calls))
	names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(last, n) })
	return append(names, last...)
}

// Answer is err's code and message with the target's names taken out, so
// the answers for a victim's target and a missing one compare.
func Answer(err error, names ...string) (codes.Code, string) {
	st := status.Convert(err)
	msg := st.Message()
	for _, s := range names {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "<name>")
		}
	}
	return st.Code(), msg
}

// Drain reads a server stream to its end: nil when it ended well.
func Drain[T any](recv func() (T, error)) error {
	for {
		if _, err := recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}
