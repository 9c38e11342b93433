package auth_test

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	_ "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	_ "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	_ "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	_ "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/keystore"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
)

// echo answers with the principal it was called as: the run's tenant is
// the principal's tenant, its id the key id.
type echo struct {
	agentv1.UnimplementedAgentServiceServer
	sessionv1.UnimplementedNodeServiceServer
	// downstream, when set, is where CancelRun forwards (as a service
	// calling another would).
	downstream agentv1.AgentServiceClient
}

func runOf(ctx context.Context) *agentv1.Run {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return &agentv1.Run{Id: "anonymous"}
	}
	return &agentv1.Run{Id: p.KeyID, Tenant: auth.TenantOf(ctx)}
}

func (echo) GetRun(ctx context.Context, _ *agentv1.GetRunRequest) (*agentv1.GetRunResponse, error) {
	return &agentv1.GetRunResponse{Run: runOf(ctx)}, nil
}

func (e echo) CancelRun(ctx context.Context, _ *agentv1.CancelRunRequest) (*agentv1.CancelRunResponse, error) {
	if e.downstream != nil {
		r, err := e.downstream.GetRun(ctx, &agentv1.GetRunRequest{})
		if err != nil {
			return nil, err
		}
		return &agentv1.CancelRunResponse{Run: r.GetRun()}, nil
	}
	return &agentv1.CancelRunResponse{Run: runOf(ctx)}, nil
}

func (echo) StreamRunEvents(_ *agentv1.StreamRunEventsRequest, ss grpc.ServerStreamingServer[agentv1.StreamRunEventsResponse]) error {
	r := runOf(ss.Context())
	return ss.Send(&agentv1.StreamRunEventsResponse{Event: &agentv1.RunEvent{RunId: r.GetTenant() + "/" + r.GetId()}})
}

func (echo) DrainNode(ctx context.Context, _ *sessionv1.DrainNodeRequest) (*sessionv1.DrainNodeResponse, error) {
	return &sessionv1.DrainNodeResponse{Node: &sessionv1.Node{Id: auth.TenantOf(ctx)}}, nil
}

type env struct {
	store    *keystore.Store
	verifier *auth.Verifier
	addr     string
}

const internalToken = "internal-token-for-tests"

func startServer(t *testing.T, store *keystore.Store, downstream agentv1.AgentServiceClient) *env {
	t.Helper()
	v := auth.NewVerifier(store, auth.VerifierConfig{InternalToken: internalToken}, nil)
	srv := grpcserver.New(grpcserver.Options{Logger: slog.New(slog.DiscardHandler), ServerOptions: auth.ServerOptions(v, nil)})
	e := echo{downstream: downstream}
	agentv1.RegisterAgentServiceServer(srv.GRPC, e)
	sessionv1.RegisterNodeServiceServer(srv.GRPC, e)
	srv.SetServing("")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	return &env{store: store, verifier: v, addr: lis.Addr().String()}
}

func openStore(t *testing.T) *keystore.Store {
	t.Helper()
	s, err := keystore.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "auth.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func mustKey(t *testing.T, s *keystore.Store, tenant string, scopes ...auth.Scope) (keystore.Key, string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.GetTenant(ctx, tenant); err != nil {
		if _, err := s.CreateTenant(ctx, tenant, ""); err != nil {
			t.Fatal(err)
		}
	}
	k, plain, err := s.CreateKey(ctx, tenant, scopes, "test", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return k, plain
}

func withAuth(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

func TestGRPCInterceptors(t *testing.T) {
	store := openStore(t)
	e := startServer(t, store, nil)
	cc := dial(t, e.addr)
	agent := agentv1.NewAgentServiceClient(cc)
	nodes := sessionv1.NewNodeServiceClient(cc)
	readK, readKey := mustKey(t, store, "acme", auth.ScopeRead)
	writeK, writeKey := mustKey(t, store, "acme", auth.ScopeWrite)
	_, adminKey := mustKey(t, store, "ops", auth.ScopeAdmin)
	revokedK, revokedKey := mustKey(t, store, "acme", auth.ScopeWrite)
	if err := store.RevokeKey(context.Background(), revokedK.ID); err != nil {
		t.Fatal(err)
	}

	type call func(ctx context.Context) (*agentv1.Run, error)
	get := func(ctx context.Context) (*agentv1.Run, error) {
		r, err := agent.GetRun(ctx, &agentv1.GetRunRequest{})
		return r.GetRun(), err
	}
	cancel := func(ctx context.Context) (*agentv1.Run, error) {
		r, err := agent.CancelRun(ctx, &agentv1.CancelRunRequest{})
		return r.GetRun(), err
	}
	stream := func(ctx context.Context) (*agentv1.Run, error) {
		s, err := agent.StreamRunEvents(ctx, &agentv1.StreamRunEventsRequest{})
		if err != nil {
			return nil, err
		}
		m, err := s.Recv()
		if err != nil {
			return nil, err
		}
		tenant, id, _ := strings.Cut(m.GetEvent().GetRunId(), "/")
		return &agentv1.Run{Tenant: tenant, Id: id}, nil
	}
	drain := func(ctx context.Context) (*agentv1.Run, error) {
		r, err := nodes.DrainNode(ctx, &sessionv1.DrainNodeRequest{})
		return &agentv1.Run{Tenant: r.GetNode().GetId()}, err
	}
	cases := []struct {
		name   string
		call   call
		ctx    context.Context
		code   codes.Code
		msg    string
		tenant string
		keyID  string
	}{
		{"no credentials", get, context.Background(), codes.Unauthenticated, "no credentials", "", ""},
		{"no credentials, stream", stream, context.Background(), codes.Unauthenticated, "no credentials", "", ""},
		{"not bearer", get, metadata.AppendToOutgoingContext(context.Background(), "authorization", "Basic eDp5"), codes.Unauthenticated, "Bearer", "", ""},
		{"garbage", get, withAuth("nope"), codes.Unauthenticated, "malformed", "", ""},
		{"revoked", get, withAuth(revokedKey), codes.Unauthenticated, "revoked", "", ""},
		{"read key reads", get, withAuth(readKey), codes.OK, "", "acme", readK.ID},
		{"read key streams", stream, withAuth(readKey), codes.OK, "", "acme", readK.ID},
		{"read key cannot write", cancel, withAuth(readKey), codes.PermissionDenied, `"write" scope`, "", ""},
		{"write key writes", cancel, withAuth(writeKey), codes.OK, "", "acme", writeK.ID},
		{"write key cannot drain", drain, withAuth(writeKey), codes.PermissionDenied, `"admin" scope`, "", ""},
		{"admin drains", drain, withAuth(adminKey), codes.OK, "", "ops", ""},
		{"tenant metadata ignored for keys", get, metadata.AppendToOutgoingContext(withAuth(readKey), auth.TenantMD, "victim"), codes.OK, "", "acme", readK.ID},
		{"two credentials", get, metadata.AppendToOutgoingContext(withAuth(readKey), "authorization", "Bearer "+internalToken), codes.Unauthenticated, "more than one", "", ""},
		{"internal token", get, withAuth(internalToken), codes.OK, "", "", auth.SystemKeyID},
		{"internal token acts for a tenant", cancel, metadata.AppendToOutgoingContext(withAuth(internalToken), auth.TenantMD, "acme"), codes.OK, "", "acme", auth.SystemKeyID},
		{"internal token drains", drain, withAuth(internalToken), codes.OK, "", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
			defer cancel()
			r, err := c.call(ctx)
			st := status.Convert(err)
			if st.Code() != c.code || !strings.Contains(st.Message(), c.msg) {
				t.Fatalf("got %v %q, want %v containing %q", st.Code(), st.Message(), c.code, c.msg)
			}
			if err != nil {
				return
			}
			if r.GetTenant() != c.tenant || (c.keyID != "" && r.GetId() != c.keyID) {
				t.Fatalf("called as tenant %q key %q, want %q %q", r.GetTenant(), r.GetId(), c.tenant, c.keyID)
			}
		})
	}

	// Health checks and reflection need nothing.
	ctx, cancelCtx := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelCtx()
	h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	rs, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Recv(); err != nil {
		t.Fatalf("reflection: %v", err)
	}
}

func TestClientCredentials(t *testing.T) {
	store := openStore(t)
	// A downstream service, and an upstream one whose CancelRun calls it
	// with the internal credentials.
	down := startServer(t, store, nil)
	downCC := dial(t, down.addr, grpc.WithPerRPCCredentials(auth.InternalCredentials(internalToken)))
	up := startServer(t, store, agentv1.NewAgentServiceClient(downCC))
	k, key := mustKey(t, store, "acme", auth.ScopeWrite)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// A user key on the client connection.
	userCC := dial(t, up.addr, grpc.WithPerRPCCredentials(auth.KeyCredentials(key)))
	r, err := agentv1.NewAgentServiceClient(userCC).GetRun(ctx, &agentv1.GetRunRequest{})
	if err != nil || r.GetRun().GetId() != k.ID {
		t.Fatalf("key credentials: %v %v", r, err)
	}
	// The downstream call carries the system principal acting for the
	// caller's tenant.
	c, err := agentv1.NewAgentServiceClient(userCC).CancelRun(ctx, &agentv1.CancelRunRequest{})
	if err != nil || c.GetRun().GetTenant() != "acme" || c.GetRun().GetId() != auth.SystemKeyID {
		t.Fatalf("forwarded: %v %v", c, err)
	}
	// ActAs names the tenant for work no request carries.
	down2 := agentv1.NewAgentServiceClient(downCC)
	r, err = down2.GetRun(auth.ActAs(ctx, "beta"), &agentv1.GetRunRequest{})
	if err != nil || r.GetRun().GetTenant() != "beta" || r.GetRun().GetId() != auth.SystemKeyID {
		t.Fatalf("ActAs: %v %v", r, err)
	}
	// A forwarded user key wins over the connection's internal token, so a
	// gateway relaying a user's call never lends it the system principal.
	_, readKey := mustKey(t, store, "acme", auth.ScopeRead)
	r, err = down2.GetRun(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+readKey), &agentv1.GetRunRequest{})
	if err != nil || r.GetRun().GetId() == auth.SystemKeyID || r.GetRun().GetTenant() != "acme" {
		t.Fatalf("forwarded key: %v %v", r, err)
	}
	_, err = down2.CancelRun(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+readKey), &agentv1.CancelRunRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("forwarded read key writing: %v", err)
	}
}

// Every RPC of every deskgrid service has a deliberate entry in the scope
// table, so a new RPC cannot slip in with a guessed scope.
func TestPolicyCoversEveryRPC(t *testing.T) {
	table := auth.DefaultMethodScopes()
	seen := 0
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "deskgrid.") {
			return true
		}
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				m := "/" + string(sd.FullName()) + "/" + string(sd.Methods().Get(j).Name())
				seen++
				if _, ok := table[m]; !ok {
					t.Errorf("%s has no scope in DefaultMethodScopes", m)
				}
			}
		}
		return true
	})
	if seen != len(table) {
		t.Errorf("table has %d entries for %d RPCs: remove the stale ones", len(table), seen)
	}
	p := auth.DefaultPolicy()
	for m, want := range map[string]auth.Scope{
		"/grpc.health.v1.Health/Check":                               "",
		"/grpc.health.v1.Health/Watch":                               "",
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":  "",
		"/deskgrid.session.v1.SessionService/GetSession":             auth.ScopeRead,
		"/deskgrid.session.v1.SessionService/CreateSession":          auth.ScopeWrite,
		"/deskgrid.session.v1.NodeService/DrainNode":                 auth.ScopeAdmin,
		"/deskgrid.future.v1.FutureService/ListThings":               auth.ScopeRead,
		"/deskgrid.future.v1.FutureService/DoThing":                  auth.ScopeWrite,
		"/deskgrid.future.v1.FutureService/GetHealth":                auth.ScopeRead,
		"/grpc.health.v1.HealthImpostor/Check":                       auth.ScopeWrite,
		"/deskgrid.session.v1.SessionService/grpc.health.v1.Health/": auth.ScopeWrite,
	} {
		got, open := p.Required(m)
		if open != (want == "") || got != want {
			t.Errorf("Required(%s) = %q open %v, want %q", m, got, open, want)
		}
	}
}
