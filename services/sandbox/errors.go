package sandbox

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
)

// codedError carries the gRPC code an error becomes at the handler edge.
type codedError struct {
	code codes.Code
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func coded(code codes.Code, format string, args ...any) error {
	return &codedError{code: code, err: fmt.Errorf(format, args...)}
}

func codeOf(err error) (codes.Code, bool) {
	var ce *codedError
	if errors.As(err, &ce) {
		return ce.code, true
	}
	return codes.Unknown, false
}
