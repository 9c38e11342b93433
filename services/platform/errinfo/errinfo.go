// Package errinfo names the reasons deskgrid's services give for an error,
// so a caller (another service, an SDK) decides on the reason, sent as a
// google.rpc.ErrorInfo detail, and never on the wording of the message.
package errinfo

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of every reason here.
const Domain = "deskgrid.dev"

// Reasons.
const (
	// StaleInputLease: input carried no lease token, or an older one, while
	// another holder has the session's input lease.
	StaleInputLease = "STALE_INPUT_LEASE"
	// SandboxNotFound: the session has no sandbox on the node (none was
	// made, it is being deleted, or it is another tenant's), as against a
	// file, process or snapshot missing inside a sandbox that is there.
	SandboxNotFound = "SANDBOX_NOT_FOUND"
	// SandboxFrozen: the session's sandbox is frozen (the session is
	// suspended); the call works once it is thawed.
	SandboxFrozen = "SANDBOX_FROZEN"
	// NotRegularFile: a file call named a directory or another thing that
	// is not a regular file.
	NotRegularFile = "NOT_REGULAR_FILE"
)

// Error returns a status error with code, msg and reason as its ErrorInfo.
func Error(code codes.Code, reason, msg string) error {
	st := status.New(code, msg)
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain}); err == nil {
		return withInfo.Err()
	}
	return st.Err()
}

// Reason is the deskgrid reason err carries, or "" when it carries none.
func Reason(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return ""
	}
	for _, d := range se.GRPCStatus().Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			return info.GetReason()
		}
	}
	return ""
}
