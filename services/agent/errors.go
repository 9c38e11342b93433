package agent

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deskgrid/deskgrid/services/agent/internal/runlog"
	"github.com/deskgrid/deskgrid/services/agent/lease"
	"github.com/deskgrid/deskgrid/services/agent/store"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore"
)

// Errors the handlers turn into status codes.
var (
	errClosing = errors.New("the agent service is shutting down")
	errNoNode  = errors.New("this deskgrid has no display or sandbox service for agent runs")
)

// invalidError: the request is wrong; the message says how to put it right.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

func invalid(format string, a ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, a...)}
}

// notFoundError: a run or a session that does not exist for the caller
// (another tenant's is the same as none).
type notFoundError struct{ what string }

func (e *notFoundError) Error() string { return e.what + " not found" }

func runNotFound(id string) error     { return &notFoundError{what: "run " + id} }
func sessionNotFound(id string) error { return &notFoundError{what: "session " + id} }

// preconditionError: the run or its session is not in a state that allows
// the call.
type preconditionError struct{ msg string }

func (e *preconditionError) Error() string { return e.msg }

func precondition(format string, a ...any) error {
	return &preconditionError{msg: fmt.Sprintf(format, a...)}
}

// goneError: what the call asks for is no longer kept.
type goneError struct{ msg string }

func (e *goneError) Error() string { return e.msg }

// backendError: a store or service the call needs could not be reached:
// Unavailable with msg, the cause logged, not sent.
type backendError struct {
	msg string
	err error
}

func (e *backendError) Error() string { return e.msg + ": " + e.err.Error() }
func (e *backendError) Unwrap() error { return e.err }

// storeErr wraps an error of the run store for op ("read run x"): what
// the store says of the run (not found, exists, a bad page token) and the
// caller's own deadline are told as such, a store that cannot be reached
// is an outage; anything else is the service's own fault.
func storeErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case sqlstore.IsUnreachable(err):
		return &backendError{msg: op + ": the run store did not answer; retry shortly", err: err}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// leaseErr wraps an error of the input lease manager, as storeErr.
func leaseErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lease.ErrInvalid), errors.Is(err, lease.ErrNotHolder), isContextErr(err):
		return err
	}
	return &backendError{msg: "input lease: the lease store did not answer; retry shortly", err: err}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// toStatus turns an error from inside the service into the status a caller
// sees. It is applied once, at the handler edge.
func (s *Service) toStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		// A status made on purpose (auth.ErrAnonymous): as it is.
		return err
	}
	var (
		ie *invalidError
		ne *notFoundError
		pe *preconditionError
		ge *goneError
		be *backendError
	)
	switch {
	case errors.As(err, &ie):
		return status.Error(codes.InvalidArgument, ie.msg)
	case errors.As(err, &ne):
		return status.Error(codes.NotFound, ne.Error())
	case errors.As(err, &pe):
		return status.Error(codes.FailedPrecondition, pe.msg)
	case errors.As(err, &ge):
		return status.Error(codes.OutOfRange, ge.msg)
	case errors.Is(err, errClosing):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, errNoNode):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, store.ErrInvalidPageToken):
		return status.Error(codes.InvalidArgument, "page_token is not valid")
	case errors.Is(err, store.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, store.ErrExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, lease.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, lease.ErrNotHolder):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, runlog.ErrGone):
		return status.Error(codes.OutOfRange, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.As(err, &be):
		s.logger.WarnContext(ctx, "agent call failed: a backend did not answer", "err", err)
		return status.Error(codes.Unavailable, be.msg)
	}
	s.logger.ErrorContext(ctx, "agent call failed", "err", err)
	return status.Error(codes.Internal, "internal error")
}
