package auth

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Metadata keys.
const (
	// AuthorizationMD carries "Bearer <token>".
	AuthorizationMD = "authorization"
	// TenantMD names the tenant a system call acts for; honoured only for
	// the internal token.
	TenantMD = "deskgrid-tenant"
)

// ServerOptions returns the interceptors that authenticate every call to a
// gRPC server with v and authorise it with p (nil p is DefaultPolicy).
// Pass them in grpcserver.Options.ServerOptions; they chain after the
// server's recovery and logging.
func ServerOptions(v *Verifier, p *Policy) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(v, p)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(v, p)),
	}
}

// UnaryServerInterceptor authenticates and authorises unary calls.
func UnaryServerInterceptor(v *Verifier, p *Policy) grpc.UnaryServerInterceptor {
	if p == nil {
		p = DefaultPolicy()
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := authenticateCall(ctx, v, p, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor authenticates and authorises streaming calls.
func StreamServerInterceptor(v *Verifier, p *Policy) grpc.StreamServerInterceptor {
	if p == nil {
		p = DefaultPolicy()
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := authenticateCall(ss.Context(), v, p, info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &principalStream{ServerStream: ss, ctx: ctx})
	}
}

type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *principalStream) Context() context.Context { return s.ctx }

func authenticateCall(ctx context.Context, v *Verifier, p *Policy, method string) (context.Context, error) {
	scope, open := p.Required(method)
	if open {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(AuthorizationMD)
	if len(vals) > 1 {
		// Two credentials on one call can only be a mistake or a trick
		// (one forwarded, one added by the client's credentials).
		return ctx, status.Error(codes.Unauthenticated, "more than one authorization header: send exactly one")
	}
	var token string
	if len(vals) == 1 {
		t, ok := BearerToken(vals[0])
		if !ok {
			return ctx, status.Error(codes.Unauthenticated, "authorization must be \"Bearer <API key>\"")
		}
		token = t
	}
	pr, err := v.Verify(ctx, token)
	if err != nil {
		return ctx, StatusOf(err)
	}
	if pr.System {
		if t := md.Get(TenantMD); len(t) > 0 {
			pr.Tenant = strings.TrimSpace(t[0])
		}
	}
	if !pr.Can(scope) {
		return ctx, status.Errorf(codes.PermissionDenied, "this API key lacks the %q scope that %s needs; create a key with it", scope, method)
	}
	return WithPrincipal(ctx, pr), nil
}

// StatusOf converts a Verify error to its gRPC status.
func StatusOf(err error) error {
	if errors.Is(err, ErrKeyLookup) {
		return status.Error(codes.Unavailable, ErrKeyLookup.Error())
	}
	return status.Error(codes.Unauthenticated, err.Error())
}

// InternalCredentials are the per-call credentials one deskgrid service
// uses to call another: the internal token, plus the tenant the call acts
// for (set with ActAs, or else the tenant of the request being served, so
// a handler's outgoing calls carry its caller's tenant). When the outgoing
// metadata already carries an authorization (a gateway forwarding a user's
// key) they add nothing, so the user's own key is what the callee checks.
//
// They do not demand transport security, so the token crosses plain TCP
// unless the connection uses TLS: run nodes and control plane on a private
// network or with mTLS.
func InternalCredentials(token string) credentials.PerRPCCredentials {
	return internalCreds{token: token}
}

type internalCreds struct{ token string }

func (c internalCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(AuthorizationMD)) > 0 {
		return nil, nil
	}
	out := map[string]string{AuthorizationMD: "Bearer " + c.token}
	if t := actingTenant(ctx); t != "" {
		out[TenantMD] = t
	}
	return out, nil
}

func (internalCreds) RequireTransportSecurity() bool { return false }

// KeyCredentials are per-call credentials for a client holding an API key
// (the CLI, SDKs, tests).
func KeyCredentials(key string) credentials.PerRPCCredentials { return keyCreds{key: key} }

type keyCreds struct{ key string }

func (c keyCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{AuthorizationMD: "Bearer " + c.key}, nil
}

func (keyCreds) RequireTransportSecurity() bool { return false }

type actAsKey struct{}

// ActAs marks ctx so InternalCredentials send tenant with the calls made
// under it: for work no request carries, such as a reaper ending a
// tenant's idle session.
func ActAs(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, actAsKey{}, tenant)
}

func actingTenant(ctx context.Context) string {
	if t, ok := ctx.Value(actAsKey{}).(string); ok {
		return t
	}
	return TenantOf(ctx)
}
