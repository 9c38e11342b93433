// Package grpcserver builds the one kind of gRPC server every deskgrid service
// runs: panic recovery, OpenTelemetry (traces, and the domain metrics of
// package metrics), request logging that skips health
// checks, internal errors masked before they reach a client (mask.go),
// keepalive, reflection, and a health service that says NOT_SERVING until the
// owner marks each service ready.
package grpcserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

// MaxMessageBytes bounds one gRPC message; screenshots of large screens and
// file transfers fit well within it.
const MaxMessageBytes = 64 << 20

// Server is a gRPC server with its health service.
type Server struct {
	GRPC   *grpc.Server
	health *health.Server
	logger *slog.Logger
}

// Options configure New.
type Options struct {
	Logger *slog.Logger
	// Extra server options, such as TLS credentials.
	ServerOptions []grpc.ServerOption
}

// New returns a server whose health service reports NOT_SERVING for the
// overall server ("") until SetServing("") is called.
func New(opts Options) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	notHealth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.Service != healthpb.Health_ServiceDesc.ServiceName
	})
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall)}
	recoverOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "panic in gRPC handler", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})
	sopts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.ChainUnaryInterceptor(
			recovery.UnaryServerInterceptor(recoverOpt),
			selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(slogAdapter(logger), logOpts...), notHealth),
			metrics.UnaryServerInterceptor(),
			maskUnary(logger),
		),
		grpc.ChainStreamInterceptor(
			recovery.StreamServerInterceptor(recoverOpt),
			selector.StreamServerInterceptor(logging.StreamServerInterceptor(slogAdapter(logger), logOpts...), notHealth),
			metrics.StreamServerInterceptor(),
			maskStream(logger),
		),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
	}
	sopts = append(sopts, opts.ServerOptions...)
	g := grpc.NewServer(sopts...)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(g, h)
	reflection.Register(g)
	return &Server{GRPC: g, health: h, logger: logger}
}

// SetServing marks a service (or "" for the whole server) ready.
func (s *Server) SetServing(service string) {
	s.health.SetServingStatus(service, healthpb.HealthCheckResponse_SERVING)
}

// SetNotServing marks a service (or "" for the whole server) not ready.
func (s *Server) SetNotServing(service string) {
	s.health.SetServingStatus(service, healthpb.HealthCheckResponse_NOT_SERVING)
}

// Serve accepts connections on lis until Stop.
func (s *Server) Serve(lis net.Listener) error {
	if err := s.GRPC.Serve(lis); err != nil {
		return fmt.Errorf("grpc serve %s: %w", lis.Addr(), err)
	}
	return nil
}

// Stop reports NOT_SERVING, then drains calls in flight until ctx ends and
// closes whatever is left.
func (s *Server) Stop(ctx context.Context) {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.GRPC.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.GRPC.Stop()
		<-done
	}
}

func slogAdapter(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}
