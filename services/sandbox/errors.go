package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/errinfo"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/fsroot"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
)

// The kinds of failure a caller can act on. Code inside the service says
// what went wrong with an error of one of these kinds (made by failf or
// invalidf, or wrapped with %w) and never which gRPC code it becomes:
// toStatus, at the gRPC edge, is the one place that decides.
var (
	// errInvalid: the request is malformed or asks for what no sandbox
	// allows; the caller must change it.
	errInvalid = errors.New("invalid request")
	// errNoSandbox: the session has no ready sandbox on this node: none
	// was made, it is being deleted, or it is another tenant's (which is
	// reported exactly as a missing one).
	errNoSandbox = errors.New("no sandbox")
	// errNotFound: the sandbox is there but has no such snapshot, process,
	// application, change or accessible node.
	errNotFound = errors.New("not found")
	// errExists: the session already has a sandbox on this node, or a
	// leftover of one.
	errExists = errors.New("sandbox exists")
	// errRefused: the node's configuration does not allow what is asked (a
	// workspace outside its workspace roots).
	errRefused = errors.New("refused by the node's configuration")
	// errFrozen: the sandbox is frozen (its session is suspended); the call
	// works once it is thawed.
	errFrozen = errors.New("sandbox frozen")
	// errBusy: the call needs the sandbox idle, and commands, file calls or
	// processes run in it.
	errBusy = errors.New("sandbox busy")
	// errPrecondition: the sandbox, its session or this node is not of a
	// kind, or not in a state, that allows the call (a copied sandbox, a
	// node without cgroups or images, a session without an accessibility
	// bus or X socket, an application that cannot start...).
	errPrecondition = errors.New("not possible for this sandbox")
	// errInterrupted: the sandbox changed under the call: it was deleted
	// while a command ran, or its shell had ended.
	errInterrupted = errors.New("interrupted")
	// errClosed: the service is shutting down.
	errClosed = errors.New("sandbox service is shutting down")
	// errMissingProgram: the node lacks a program the call needs (runc,
	// bubblewrap, slirp4netns).
	errMissingProgram = errors.New("program missing on the node")
	// errUnavailable: a part of the session the call needs failed or did
	// not take (its accessibility bus, its X socket); trying again may work.
	errUnavailable = errors.New("unavailable")
	// errNoRoom: the node or the sandbox has no room for one more (an id
	// range, a started program).
	errNoRoom = errors.New("no room")
	// errCorrupt: stored data fails its check (a snapshot's checksum).
	errCorrupt = errors.New("corrupt")
	// errNoAnswer: an application in the session did not answer in time.
	errNoAnswer = errors.New("no answer in time")
	// errUploadEnded: the client ended an upload before its last message.
	errUploadEnded = errors.New("upload ended early")
)

// kindError is an error of one kind with a message of its own.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// failf returns an error of kind whose message is fmt.Errorf(format, args...).
func failf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, args...)}
}

// invalidf returns an errInvalid error: a request the caller must change.
func invalidf(format string, args ...any) error { return failf(errInvalid, format, args...) }

// imageError is a failure of the node's image store about a sandbox's
// image; the store's own kinds (image.ErrNotFound...) decide its code.
type imageError struct{ err error }

func (e *imageError) Error() string { return e.err.Error() }
func (e *imageError) Unwrap() error { return e.err }

// imageErrorf wraps a failure of the image store with the context of the
// call, as fmt.Errorf(format, args...) with the store's error among args.
func imageErrorf(format string, args ...any) error {
	return &imageError{err: fmt.Errorf(format, args...)}
}

// toStatus turns an error from inside the service into the status a caller
// sees, once, at the gRPC edge; op names the call in messages. Errors of no
// known kind are logged and masked.
func (s *Service) toStatus(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var ie *imageError
	switch {
	case errors.Is(err, errInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, errNoSandbox):
		return errinfo.Error(codes.NotFound, errinfo.SandboxNotFound, err.Error())
	case errors.Is(err, errNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, errExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, errRefused):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, errFrozen):
		return errinfo.Error(codes.FailedPrecondition, errinfo.SandboxFrozen, err.Error())
	case errors.Is(err, errBusy), errors.Is(err, errPrecondition):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, errInterrupted):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, errClosed), errors.Is(err, errMissingProgram), errors.Is(err, errUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, errNoRoom):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, errCorrupt):
		return status.Error(codes.DataLoss, err.Error())
	case errors.Is(err, errNoAnswer):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, errUploadEnded):
		return status.Error(codes.Canceled, err.Error())
	case errors.As(err, &ie):
		return status.Error(image.Code(ie.err), err.Error())
	}
	if errinfo.Reason(err) != "" {
		// A status with a reason (the input lease's refusal): as it is.
		return err
	}
	switch {
	case errors.Is(err, auth.ErrAnonymous):
		return auth.ErrAnonymous
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, op+": deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, op+": canceled")
	case errors.Is(err, jail.ErrNoSlirp):
		// Before fs.ErrNotExist, which it wraps: the program is missing, not a file.
		return status.Errorf(codes.Unavailable, "%s: this node cannot give sandboxes network: %s is not installed (Debian package slirp4netns)", op, s.cfg.SlirpPath)
	case errors.Is(err, fsroot.ErrNotRegular):
		return errinfo.Error(codes.InvalidArgument, errinfo.NotRegularFile, err.Error())
	case errors.Is(err, fsroot.ErrInvalidPath), errors.Is(err, fsroot.ErrNotDir):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, fsroot.ErrEscape):
		return status.Error(codes.PermissionDenied, err.Error()+": symlinks may not lead out of the sandbox home")
	case errors.Is(err, fsroot.ErrTooLarge):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, fs.ErrNotExist):
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return status.Errorf(codes.NotFound, "%s does not exist in the sandbox", pe.Path)
		}
		return status.Error(codes.NotFound, "no such file in the sandbox")
	case errors.Is(err, syscall.ENOTEMPTY):
		return status.Error(codes.FailedPrecondition, err.Error()+": the directory is not empty; ask for a recursive delete")
	case errors.Is(err, fs.ErrExist):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		s.limits.diskFull.Add(1)
		return status.Error(codes.ResourceExhausted, op+": the session's disk is full; free space or ask for a larger disk_bytes")
	}
	s.log.ErrorContext(ctx, "sandbox call failed", "op", op, "error", err)
	return status.Errorf(codes.Internal, "%s failed on the node; see its logs", op)
}
