package grpcserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
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

// failing answers with whatever error the test sets.
type failing struct {
	agentv1.UnimplementedAgentServiceServer
	err error
}

func (f *failing) GetRun(context.Context, *agentv1.GetRunRequest) (*agentv1.GetRunResponse, error) {
	return nil, f.err
}

func (f *failing) StreamRunEvents(*agentv1.StreamRunEventsRequest, grpc.ServerStreamingServer[agentv1.StreamRunEventsResponse]) error {
	return f.err
}

// Internal errors reach the client as a reference only; the log holds the
// original under that reference. Errors a handler meant for the client keep
// their code and words.
func TestInternalErrorsAreMasked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	f := &failing{}
	srv := New(Options{Logger: logger})
	agentv1.RegisterAgentServiceServer(srv.GRPC, f)
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
	c := agentv1.NewAgentServiceClient(conn)

	const secret = "pq: password authentication failed for user deskgrid at 10.0.0.7:5432 /var/lib/deskgrid/agent.db"
	refRE := regexp.MustCompile(`^internal error \(ref ([0-9a-f]{8})\)$`)
	for _, tc := range []struct {
		name     string
		err      error
		want     codes.Code
		wantText string // "" means masked
	}{
		{"store error returned as it came", fmt.Errorf("load run: %w", errors.New(secret)), codes.Internal, ""},
		{"Internal status", status.Error(codes.Internal, secret), codes.Internal, ""},
		{"Unknown status", status.Error(codes.Unknown, secret), codes.Internal, ""},
		{"DataLoss status", status.Error(codes.DataLoss, secret), codes.Internal, ""},
		{"NotFound kept", status.Error(codes.NotFound, "run r-1 not found"), codes.NotFound, "run r-1 not found"},
		{"InvalidArgument kept", status.Error(codes.InvalidArgument, "path: at most 4096 bytes"), codes.InvalidArgument, "path: at most 4096 bytes"},
		{"ResourceExhausted kept", status.Error(codes.ResourceExhausted, "quota"), codes.ResourceExhausted, "quota"},
		{"deadline kept", fmt.Errorf("exec: %w", context.DeadlineExceeded), codes.DeadlineExceeded, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.err = tc.err
			_, uerr := c.GetRun(ctx, &agentv1.GetRunRequest{RunId: "r"})
			stream, err := c.StreamRunEvents(ctx, &agentv1.StreamRunEventsRequest{RunId: "r"})
			if err != nil {
				t.Fatal(err)
			}
			_, serr := stream.Recv()
			for kind, err := range map[string]error{"unary": uerr, "stream": serr} {
				st := status.Convert(err)
				if st.Code() != tc.want {
					t.Fatalf("%s: %v, want %v", kind, err, tc.want)
				}
				if strings.Contains(st.Message(), "password") {
					t.Fatalf("%s: the client read the internal error: %q", kind, st.Message())
				}
				if tc.want == codes.Internal {
					m := refRE.FindStringSubmatch(st.Message())
					if m == nil {
						t.Fatalf("%s: masked message %q", kind, st.Message())
					}
					mu.Lock()
					logged := logs.String()
					mu.Unlock()
					if !strings.Contains(logged, "ref="+m[1]) || !strings.Contains(logged, "password authentication failed") {
						t.Fatalf("%s: the log has no original under ref %s:\n%s", kind, m[1], logged)
					}
				} else if tc.wantText != "" && st.Message() != tc.wantText {
					t.Fatalf("%s: message %q, want %q", kind, st.Message(), tc.wantText)
				}
			}
		})
	}
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }
