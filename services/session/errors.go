package session

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deskgrid/deskgrid/services/platform/auth/quota"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore"
	"github.com/deskgrid/deskgrid/services/session/placement"
	"github.com/deskgrid/deskgrid/services/session/state"
	"github.com/deskgrid/deskgrid/services/session/store"
)

// Errors the handlers turn into status codes.
var (
	errNotFound = errors.New("session not found")
	// errAborted: another call changed the session under this one, such as a
	// delete while it was starting.
	errAborted = errors.New("session changed by another call")
	errClosing = errors.New("session service is shutting down")
)

// nodeError is a failed call to a node's display, sandbox or images.
type nodeError struct {
	Node string
	Op   string
	Err  error
	// Answered: the node was reached and answered Err itself, even if its
	// code is Unavailable (its registry was unreachable).
	Answered bool
}

func (e *nodeError) Error() string {
	// A node's status by its message: its code is the caller's to give.
	if st, ok := status.FromError(e.Err); ok && st.Code() != codes.OK {
		return fmt.Sprintf("node %s: %s: %s", e.Node, e.Op, st.Message())
	}
	return fmt.Sprintf("node %s: %s: %v", e.Node, e.Op, e.Err)
}
func (e *nodeError) Unwrap() error { return e.Err }

// preconditionError: the session is not in a state that allows the call.
type preconditionError struct{ msg string }

func (e *preconditionError) Error() string { return e.msg }

// unimplementedError: the call is valid but this version cannot do it.
type unimplementedError struct{ msg string }

func (e *unimplementedError) Error() string { return e.msg }

// toStatus turns an error from inside the service into the status a caller
// sees. It is applied once, at the handler edge.
func (s *Service) toStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isWrapped(err) {
		return err
	}
	var (
		fe *fieldError
		ne *nodeError
		pe *preconditionError
		ue *unimplementedError
		te *state.TransitionError
	)
	switch {
	case errors.As(err, &fe):
		st := status.New(codes.InvalidArgument, err.Error())
		if d, derr := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{
			Field: fe.Field, Description: fe.Reason,
		}}}); derr == nil {
			st = d
		}
		return st.Err()
	case errors.Is(err, store.ErrInvalidPageToken):
		return status.Error(codes.InvalidArgument, "page_token: is not a token this service made for these filters")
	case errors.Is(err, errNotFound), errors.Is(err, store.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, quota.ErrExceeded):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, placement.ErrNoCapacity):
		return status.Error(codes.ResourceExhausted, err.Error()+"; delete a session or try later")
	case errors.Is(err, placement.ErrNoMatchingNode):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, placement.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error()+"; retry shortly")
	case errors.As(err, &pe), errors.As(err, &te):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.As(err, &ue):
		return status.Error(codes.Unimplemented, err.Error())
	case errors.Is(err, errAborted), errors.Is(err, store.ErrConflict):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, errClosing):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case sqlstore.IsUnreachable(err) && !errors.As(err, &ne):
		// The session store could not be reached: an outage the caller may
		// retry. The cause (an address, a driver message) is logged, not sent.
		s.log.WarnContext(ctx, "session call failed: the session store did not answer", "err", err)
		return status.Error(codes.Unavailable, "the session store did not answer; retry shortly")
	case errors.As(err, &ne):
		// A node that refuses the request for its own reasons says why; any
		// other failure means the node could not be reached or did not cope.
		if st, ok := status.FromError(ne.Err); ok {
			switch st.Code() {
			case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted, codes.DeadlineExceeded, codes.NotFound, codes.Unavailable:
				return status.Error(st.Code(), err.Error())
			}
		}
		return status.Error(codes.Unavailable, err.Error())
	}
	s.log.ErrorContext(ctx, "session call failed", "err", err)
	return status.Error(codes.Internal, "internal error")
}

// isWrapped reports whether err is something other than a bare status error
// (status.FromError also unwraps).
func isWrapped(err error) bool {
	_, ok := err.(interface{ GRPCStatus() *status.Status })
	return !ok
}
