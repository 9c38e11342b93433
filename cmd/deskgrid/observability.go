package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

// serveMetrics serves /metrics on -metrics-addr, for the roles whose
// metrics the gateway does not serve. It returns the address it listens on.
func (s *setup) serveMetrics() (string, error) {
	if s.cfg.MetricsAddr == "" {
		return "", nil
	}
	lis, err := net.Listen("tcp", s.cfg.MetricsAddr)
	if err != nil {
		return "", fmt.Errorf("metrics listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.tel.Metrics)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.closers.add("metrics server", srv.Shutdown)
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("metrics server", "err", err)
		}
	}()
	return lis.Addr().String(), nil
}

// telemetryDialOptions go on every connection a role makes to another: the
// trace context travels with each call, and a create's node calls are
// timed as its phases (package metrics).
func telemetryDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithChainUnaryInterceptor(metrics.UnaryClientInterceptor()),
	}
}
