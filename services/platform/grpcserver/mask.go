package grpcserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors a client may read are the ones a handler meant for it: a status
// with a code such as NotFound or InvalidArgument. Anything else (Internal,
// Unknown, DataLoss, or an error that is no status at all, such as a store's
// error returned as it came) can carry file paths, SQL, addresses or keys;
// the client gets "internal error (ref …)" and the log gets the original
// under the same reference, so an operator can find it from a user's report.

// maskedCodes are the codes whose messages never reach a client.
var maskedCodes = map[codes.Code]bool{codes.Internal: true, codes.Unknown: true, codes.DataLoss: true}

// Mask returns err as a client may see it, logging what it hides.
func Mask(ctx context.Context, logger *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if ok && !maskedCodes[st.Code()] {
		return err
	}
	if !ok {
		// A context error is what the caller did (cancel) or asked for (a
		// deadline), not an internal fault.
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return status.FromContextError(err).Err()
		}
	}
	ref := newRef()
	logger.ErrorContext(ctx, "internal error", "ref", ref, "method", method, "err", err)
	return status.Errorf(codes.Internal, "internal error (ref %s)", ref)
}

func newRef() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func maskUnary(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err != nil {
			return nil, Mask(ctx, logger, info.FullMethod, err)
		}
		return resp, nil
	}
}

func maskStream(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return Mask(ss.Context(), logger, info.FullMethod, handler(srv, ss))
	}
}
