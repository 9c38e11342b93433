package image

import (
	"context"
	"errors"
	"syscall"

	"google.golang.org/grpc/codes"
)

// The kinds of failure a caller can act on; every error the store returns
// wraps one of them (or is a plain internal error).
var (
	// ErrNotFound: no such image, tag or pin is known to this node.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: a malformed reference, an archive that is not an image, a
	// layer whose content does not match its digest, a hostile archive.
	ErrInvalid = errors.New("invalid")
	// ErrPrecondition: the image exists but cannot run here (another CPU
	// architecture or OS), or the registry refused access.
	ErrPrecondition = errors.New("failed precondition")
	// ErrUnavailable: the registry could not be reached or failed.
	ErrUnavailable = errors.New("unavailable")
	// ErrExhausted: a bound of the store was reached (a tenant's tags).
	ErrExhausted = errors.New("resource exhausted")
)

// Code is the gRPC code an error from the store becomes at a handler edge.
func Code(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, ErrNotFound):
		return codes.NotFound
	case errors.Is(err, ErrInvalid):
		return codes.InvalidArgument
	case errors.Is(err, ErrPrecondition):
		return codes.FailedPrecondition
	case errors.Is(err, ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, ErrExhausted), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return codes.ResourceExhausted
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Internal
}
