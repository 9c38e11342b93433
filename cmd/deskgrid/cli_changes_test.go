package main

import (
	"bytes"
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

type discardingSandbox struct {
	sandboxv1.UnimplementedSandboxServiceServer
}

func (discardingSandbox) DiscardChanges(_ context.Context, req *sandboxv1.DiscardChangesRequest) (*sandboxv1.DiscardChangesResponse, error) {
	return &sandboxv1.DiscardChangesResponse{Discarded: req.GetPaths()}, nil
}

// `changes discard` tells what it discarded a line per path, as apply does,
// and JSON with -o json.
func TestCLIChangesDiscardOutput(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	sandboxv1.RegisterSandboxServiceServer(srv, discardingSandbox{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	t.Setenv("DESKGRID_API_KEY", "dg_0000000000000000_test")

	var out, errb bytes.Buffer
	if err := runChanges(context.Background(), []string{"-addr", lis.Addr().String(), "s-aaaaaaaaaaaaaaaaaaaa", "discard", "etc/a", "etc/b"}, &out, &errb); err != nil {
		t.Fatalf("changes discard: %v\n%s", err, errb.String())
	}
	if got, want := out.String(), "discarded etc/a\ndiscarded etc/b\n"; got != want {
		t.Errorf("changes discard printed %q, want %q", got, want)
	}
	out.Reset()
	if err := runChanges(context.Background(), []string{"-addr", lis.Addr().String(), "-o", "json", "s-aaaaaaaaaaaaaaaaaaaa", "discard", "etc/a"}, &out, &errb); err != nil {
		t.Fatalf("changes discard -o json: %v", err)
	}
	if !bytes.Contains(out.Bytes(), []byte(`"discarded"`)) {
		t.Errorf("changes discard -o json printed %q", out.String())
	}
}
