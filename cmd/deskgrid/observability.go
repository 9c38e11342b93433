package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"

	"github.com/deskgrid/deskgrid/services/platform/events"
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

// observeConsumers reports how far each durable consumer of the event
// stream (history's ingest) is behind. Clients' ephemeral consumers are
// left out: their names are unbounded.
func (s *setup) observeConsumers(js jetstream.JetStream) error {
	stop, err := metrics.ObserveConsumers(func(ctx context.Context) ([]metrics.ConsumerLag, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, events.StreamName)
		if err != nil {
			return nil, err
		}
		var out []metrics.ConsumerLag
		list := st.ListConsumers(ctx)
		for ci := range list.Info() {
			if ci.Config.Durable == "" {
				continue
			}
			out = append(out, metrics.ConsumerLag{Consumer: ci.Name, Pending: int64(ci.NumPending), AckPending: int64(ci.NumAckPending)})
		}
		return out, list.Err()
	})
	if err != nil {
		return err
	}
	s.closers.add("event consumer metrics", func(context.Context) error { return stop() })
	return nil
}

// observeBlobs reports the size of history's blob directory, walked at
// most once a minute so a scrape does not walk a large store every time.
func (s *setup) observeBlobs(dir string) error {
	var (
		mu           sync.Mutex
		at           time.Time
		bytes, files int64
	)
	stop, err := metrics.ObserveBlobs(func(ctx context.Context) (int64, int64, error) {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < time.Minute {
			return bytes, files, nil
		}
		var b, n int64
		err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					b += fi.Size()
					n++
				}
			}
			return ctx.Err()
		})
		if err != nil {
			return 0, 0, err
		}
		at, bytes, files = time.Now(), b, n
		return b, n, nil
	})
	if err != nil {
		return err
	}
	s.closers.add("blob store metrics", func(context.Context) error { return stop() })
	return nil
}

// countEvents counts state changes and token usage from the event stream.
func (s *setup) countEvents(nc *nats.Conn, kinds metrics.EventKinds) error {
	stop, err := metrics.CountEvents(nc, kinds)
	if err != nil {
		return err
	}
	s.closers.add("event metrics", func(context.Context) error { return stop() })
	return nil
}
