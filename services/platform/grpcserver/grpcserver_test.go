package grpcserver

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
)

type panicky struct {
	agentv1.UnimplementedAgentServiceServer
}

func (panicky) GetRun(context.Context, *agentv1.GetRunRequest) (*agentv1.GetRunResponse, error) {
	panic("boom")
}

func TestHealthAndRecovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := New(Options{})
	agentv1.RegisterAgentServiceServer(srv.GRPC, panicky{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(context.Background()) })

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	if s := check(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("before ready: %v", s)
	}
	srv.SetServing("")
	if s := check(); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after ready: %v", s)
	}

	_, err = agentv1.NewAgentServiceClient(conn).GetRun(ctx, &agentv1.GetRunRequest{RunId: "r"})
	if status.Code(err) != codes.Internal {
		t.Fatalf("panicking handler: %v, want Internal", err)
	}
	// The server survived the panic.
	if s := check(); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after panic: %v", s)
	}
}
