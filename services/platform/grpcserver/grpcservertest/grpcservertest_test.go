package grpcservertest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
)

// failing answers GetRun with an internal error naming a secret.
type failing struct {
	agentv1.UnimplementedAgentServiceServer
}

func (failing) GetRun(context.Context, *agentv1.GetRunRequest) (*agentv1.GetRunResponse, error) {
	return nil, status.Error(codes.Internal, "dial 10.0.0.7:5432: password=hunter2")
}

func register(r grpc.ServiceRegistrar) { agentv1.RegisterAgentServiceServer(r, failing{}) }

// The test server is the production one: ready unless told otherwise,
// internal errors masked, on loopback or bufconn alike, and gone after
// Close.
func TestStartServesTheProductionServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts grpcservertest.Options
		want healthpb.HealthCheckResponse_ServingStatus
	}{
		{"loopback", grpcservertest.Options{}, healthpb.HealthCheckResponse_SERVING},
		{"bufconn", grpcservertest.Options{Bufconn: true}, healthpb.HealthCheckResponse_SERVING},
		{"not serving", grpcservertest.Options{NotServing: true}, healthpb.HealthCheckResponse_NOT_SERVING},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv := grpcservertest.Start(t, register, tc.opts)
			if tc.opts.Bufconn != (srv.Addr == "bufnet") {
				t.Fatalf("address %q with bufconn %v", srv.Addr, tc.opts.Bufconn)
			}
			cc := srv.Dial(t)
			h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || h.GetStatus() != tc.want {
				t.Fatalf("health: %v, %v; want %v", h, err, tc.want)
			}
			_, err = agentv1.NewAgentServiceClient(cc).GetRun(ctx, &agentv1.GetRunRequest{RunId: "r"})
			if st := status.Convert(err); st.Code() != codes.Internal || strings.Contains(st.Message(), "hunter2") {
				t.Fatalf("internal error reached the client as %v", err)
			}
			srv.Close()
			srv.Close()
			if _, err := agentv1.NewAgentServiceClient(cc).GetRun(ctx, &agentv1.GetRunRequest{RunId: "r"}); status.Code(err) != codes.Unavailable {
				t.Fatalf("call after Close: %v, want Unavailable", err)
			}
		})
	}
}
