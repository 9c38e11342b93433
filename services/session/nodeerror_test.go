package session

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A node's refusal reads as the node's message, without gRPC's own
// wrapping ("rpc error: code = ... desc = ..."): the status code is given
// once, by the call's own status.
func TestNodeErrorMessage(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{status.Error(codes.Unavailable, "pull docker.io/nope/none:1: the registry is unreachable"), "node local: pull image nope/none:1: pull docker.io/nope/none:1: the registry is unreachable"},
		{errors.New("dial tcp: connection refused"), "node local: pull image nope/none:1: dial tcp: connection refused"},
	} {
		e := &nodeError{Node: "local", Op: "pull image nope/none:1", Err: c.err}
		if got := e.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
		if status.Code(c.err) != codes.Unknown && status.Code(errors.Unwrap(e)) != status.Code(c.err) {
			t.Errorf("the node's status is lost: %v", errors.Unwrap(e))
		}
	}
}
