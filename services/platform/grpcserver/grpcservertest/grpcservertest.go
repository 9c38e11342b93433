// Package grpcservertest serves a test's gRPC services on the production
// server of package grpcserver (recovery, masking, metrics, health), so a
// test meets what a client of a real deskgrid process meets, and stops it
// when the test ends.
package grpcservertest

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
)

// Options configure Start.
type Options struct {
	// ServerOptions are added to the production ones (auth interceptors,
	// a recorder's, TLS).
	ServerOptions []grpc.ServerOption
	// Logger gets the server's request log; nil discards it.
	Logger *slog.Logger
	// Bufconn serves on an in-memory listener instead of a loopback port.
	Bufconn bool
	// NotServing leaves the health service at NOT_SERVING, as a process
	// that is not ready yet.
	NotServing bool
}

// Server is a started grpcserver.Server.
type Server struct {
	*grpcserver.Server
	// Addr is the loopback address it listens on, "bufnet" on bufconn.
	Addr string
	buf  *bufconn.Listener
}

// Start builds a grpcserver.Server, lets register add the test's services,
// marks it serving (unless opts.NotServing) and serves it until the test
// ends.
func Start(tb testing.TB, register func(grpc.ServiceRegistrar), opts Options) *Server {
	tb.Helper()
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	srv := grpcserver.New(grpcserver.Options{Logger: logger, ServerOptions: opts.ServerOptions})
	register(srv.GRPC)
	if !opts.NotServing {
		srv.SetServing("")
	}
	s := &Server{Server: srv}
	var lis net.Listener
	if opts.Bufconn {
		s.buf = bufconn.Listen(1 << 20)
		lis, s.Addr = s.buf, "bufnet"
	} else {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		lis, s.Addr = l, l.Addr().String()
	}
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(s.Close)
	return s
}

// Dial returns a client connection to s, closed when the test ends (before
// the server stops, as cleanups run last-in first-out).
func (s *Server) Dial(tb testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	target := s.Addr
	base := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if s.buf != nil {
		target = "passthrough:///bufnet"
		base = append(base, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return s.buf.DialContext(ctx)
		}))
	}
	cc, err := grpc.NewClient(target, append(base, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Close stops s at once, ending the calls in flight, as a peer that went
// away would. It may be called more than once.
func (s *Server) Close() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.Stop(ctx)
}

// Serve starts register's services and returns a connection to them: Start
// and Dial in one, for a test that needs only the client.
func Serve(tb testing.TB, register func(grpc.ServiceRegistrar), opts Options) *grpc.ClientConn {
	tb.Helper()
	return Start(tb, register, opts).Dial(tb)
}
