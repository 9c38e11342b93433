package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// A command's error reads the same whether it came as a gRPC status or
// through the SDK: the code in lower case and the server's message, with
// "deskgrid:" once (main adds it).
func TestRPCError(t *testing.T) {
	want := `notfound: session "s-1" offers no application "x"`
	for _, err := range []error{
		status.Error(codes.NotFound, `session "s-1" offers no application "x"`),
		&deskgrid.Error{Code: codes.NotFound, Message: `session "s-1" offers no application "x"`},
	} {
		if got := rpcError(err).Error(); got != want {
			t.Errorf("rpcError(%v) = %q, want %q", err, got, want)
		}
	}
	other := errors.New("chromium started (process p3) but no window of it appeared")
	if got := rpcError(other); got != other {
		t.Errorf("rpcError(%v) = %v, want it as it is", other, got)
	}
}

// A refused key (or none) says where the command takes its key from, the
// data dir it read included: deskgrid up with -data-dir keeps its key there.
func TestRPCErrorNamesKeySources(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DESKGRID_DATA_DIR", dir)
	got := rpcError(status.Error(codes.Unauthenticated, "no credentials")).Error()
	for _, want := range []string{"unauthenticated: no credentials; ", "-api-key", "DESKGRID_API_KEY", filepath.Join(dir, "admin.key"), "DESKGRID_DATA_DIR"} {
		if !strings.Contains(got, want) {
			t.Errorf("rpcError = %q, want it to name %q", got, want)
		}
	}
	if got := rpcError(status.Error(codes.PermissionDenied, "read scope")).Error(); got != "permissiondenied: read scope" {
		t.Errorf("rpcError of another code = %q, want the message alone", got)
	}
}
