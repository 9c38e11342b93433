package agent

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
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/agent/lease"
	"github.com/deskgrid/deskgrid/services/agent/store"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
)

// A failing run store reaches the client as "internal error (ref …)", never
// in the store's own words (driver messages, file paths, SQL).
func TestStoreFailureReachesClientMasked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "agent.db")
	st, err := store.OpenSQLite(ctx, path, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	node := startNode(t, newFakeNode())
	svc, err := New(ctx, DefaultConfig(), Deps{
		Display: displayv1.NewDisplayServiceClient(node), Sandbox: sandboxv1.NewSandboxServiceClient(node), Store: st,
		Leases: lease.NewMemory(nil), Tenancy: tenantFromMetadata,
		Sessions: sessionv1.NewSessionServiceClient(startSessions(t, &fakeSessions{})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	srv := grpcserver.New(grpcserver.Options{})
	svc.Register(srv.GRPC)
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
	t.Cleanup(func() { _ = conn.Close() })
	c := agentv1.NewAgentServiceClient(conn)

	// The store's database goes away under the running service.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, getErr := c.GetRun(ctx, &agentv1.GetRunRequest{RunId: "r-0123456789abcdef"})
	_, listErr := c.ListRuns(ctx, &agentv1.ListRunsRequest{SessionId: "s-aaaaaaaaaaaaaaaaaaaa"})
	for name, err := range map[string]error{"GetRun": getErr, "ListRuns": listErr} {
		st := status.Convert(err)
		if st.Code() != codes.Internal || !strings.HasPrefix(st.Message(), "internal error (ref ") {
			t.Errorf("%s with a failed store: %v", name, err)
		}
		for _, leak := range []string{"sql", "database", path, "closed"} {
			if strings.Contains(st.Message(), leak) {
				t.Errorf("%s told the client %q", name, st.Message())
			}
		}
	}
}
