package auth_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deskgrid/deskgrid/services/platform/auth"
)

// The one tenancy rule, as a table: who sees what, and whose scope a
// caller's reads and creations have.
func TestTenancyRule(t *testing.T) {
	anon := auth.ForTenant("")
	for _, tc := range []struct {
		name   string
		c      auth.Caller
		sees   map[string]bool // owner -> seen
		scope  string
		denied bool
	}{
		{"auth off", auth.Unrestricted, map[string]bool{"": true, "acme": true, "other": true}, "", false},
		{"system", auth.System, map[string]bool{"": true, "acme": true, "other": true}, "", false},
		{"tenant", auth.ForTenant("acme"), map[string]bool{"": true, "acme": true, "other": false}, "acme", false},
		{"anonymous", anon, map[string]bool{"": false, "acme": false, "other": false}, "", true},
		{"zero caller", auth.Caller{}, map[string]bool{"": false, "acme": false}, "", true},
		{"tenant kind without a tenant", auth.Caller{Kind: auth.TenantCaller}, map[string]bool{"": true, "acme": false}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for owner, want := range tc.sees {
				if got := tc.c.Sees(owner); got != want {
					t.Errorf("Sees(%q) = %v, want %v", owner, got, want)
				}
			}
			scope, err := tc.c.Scope()
			if tc.denied {
				if status.Code(err) != codes.Unauthenticated {
					t.Fatalf("Scope() = %q, %v; want Unauthenticated", scope, err)
				}
				return
			}
			if err != nil || scope != tc.scope {
				t.Fatalf("Scope() = %q, %v; want %q", scope, err, tc.scope)
			}
		})
	}
	if anon.Kind == auth.SystemCaller || auth.ForTenant("").Kind != auth.Anonymous {
		t.Fatal("a caller for no tenant is the system")
	}
	var off auth.Tenancy
	if c := off.Caller(context.Background()); c != auth.Unrestricted {
		t.Fatalf("nil Tenancy: %+v, want auth off", c)
	}
}

// What a caller creates is recorded under its scope, and under
// DefaultTenant with auth off; an anonymous caller creates nothing.
func TestTenancyOwner(t *testing.T) {
	for _, tc := range []struct {
		c    auth.Caller
		want string
	}{
		{auth.Unrestricted, auth.DefaultTenant},
		{auth.System, ""},
		{auth.ForTenant("acme"), "acme"},
	} {
		if got, err := tc.c.Owner(); err != nil || got != tc.want {
			t.Errorf("%v Owner() = %q, %v; want %q", tc.c.Kind, got, err, tc.want)
		}
	}
	if got, err := auth.ForTenant("").Owner(); status.Code(err) != codes.Unauthenticated {
		t.Errorf("anonymous Owner() = %q, %v; want Unauthenticated", got, err)
	}
	var off auth.Tenancy
	if got, err := off.Owner(context.Background()); err != nil || got != auth.DefaultTenant {
		t.Errorf("nil Tenancy Owner = %q, %v", got, err)
	}
}

// On a server with auth on, a caller without valid credentials is never
// the system: on an open method (health) its request reaches the handler
// anonymous, whatever tenant header it forges, and sees nothing; on any
// other method the interceptor refuses it before a handler runs. Only the
// internal token is the system.
func TestUnauthenticatedCallerIsNeverTheSystem(t *testing.T) {
	store := openStore(t)
	_, key := mustKey(t, store, "acme", auth.ScopeWrite)
	v := auth.NewVerifier(store, auth.VerifierConfig{InternalToken: internalToken}, nil)
	intercept := auth.UnaryServerInterceptor(v, nil)
	call := func(method string, md ...string) (auth.Caller, bool, error) {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(md...))
		var got auth.Caller
		ran := false
		_, err := intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, _ any) (any, error) {
			ran = true
			got = auth.Tenancy(auth.CallerOf).Caller(ctx)
			return nil, nil
		})
		return got, ran, err
	}
	const open = "/grpc.health.v1.Health/Check"
	const owned = "/deskgrid.display.v1.DisplayService/GetDisplay"
	for _, md := range [][]string{
		nil,
		{auth.TenantMD, "acme"},
		{auth.TenantMD, ""},
		{auth.AuthorizationMD, "Bearer not-the-internal-token"},
		{auth.AuthorizationMD, "Bearer not-the-internal-token", auth.TenantMD, "acme"},
		{auth.AuthorizationMD, "Basic " + internalToken},
	} {
		c, ran, err := call(open, md...)
		if err != nil || !ran {
			t.Fatalf("open method with %q: ran %v, %v", md, ran, err)
		}
		if c.Kind != auth.Anonymous || c.Sees("") || c.Sees("acme") {
			t.Errorf("open method with %q: caller %+v sees what it should not", md, c)
		}
		if _, err := c.Scope(); status.Code(err) != codes.Unauthenticated {
			t.Errorf("open method with %q: scope %v, want Unauthenticated", md, err)
		}
		if _, ran, err := call(owned, md...); ran || status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s with %q: ran %v, %v; want Unauthenticated before the handler", owned, md, ran, err)
		}
	}
	if c, _, err := call(owned, auth.AuthorizationMD, "Bearer "+internalToken); err != nil || c != auth.System {
		t.Errorf("internal token: %+v, %v; want the system", c, err)
	}
	if c, _, err := call(owned, auth.AuthorizationMD, "Bearer "+internalToken, auth.TenantMD, "acme"); err != nil || c != auth.ForTenant("acme") {
		t.Errorf("internal token for acme: %+v, %v; want tenant acme", c, err)
	}
	if c, _, err := call(owned, auth.AuthorizationMD, "Bearer "+key, auth.TenantMD, "other"); err != nil || c != auth.ForTenant("acme") {
		t.Errorf("acme's key forging tenant other: %+v, %v; want tenant acme", c, err)
	}
}
