package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/session/cluster"
	"github.com/deskgrid/deskgrid/services/session/placement"
	"github.com/deskgrid/deskgrid/services/session/state"
	sessionstore "github.com/deskgrid/deskgrid/services/session/store"
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

// liveStates are the states a session holds capacity in.
var liveStates = []sessionv1.SessionState{state.Pending, state.Starting, state.Running, state.Suspending, state.Suspended, state.Resuming, state.Stopping}

// observeSessions reports the unfinished sessions by node and state at
// every scrape, read from the records. Every session replica reports the
// same figures: dashboards take max() over replicas.
func (s *setup) observeSessions(st sessionstore.Store) error {
	stop, err := metrics.ObserveSessions(func(ctx context.Context) ([]metrics.SessionCount, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		type key struct{ node, state, tenant string }
		counts, cpu := map[key]int64{}, map[key]int64{}
		f := sessionstore.Filter{States: liveStates, PageSize: 1000}
		for {
			page, next, err := st.List(ctx, f)
			if err != nil {
				return nil, err
			}
			for _, ss := range page {
				k := key{ss.GetNodeId(), strings.ToLower(strings.TrimPrefix(ss.GetState().String(), "SESSION_STATE_")), ss.GetTenant()}
				counts[k]++
				cpu[k] += ss.GetLimits().GetCpuMillis()
			}
			if next == "" {
				break
			}
			f.PageToken = next
		}
		out := make([]metrics.SessionCount, 0, len(counts))
		for k, n := range counts {
			out = append(out, metrics.SessionCount{Node: k.node, State: k.state, Tenant: k.tenant, N: n, CPUMillis: cpu[k]})
		}
		return out, nil
	}, s.cfg.MetricsTenantUsage)
	if err != nil {
		return err
	}
	s.closers.add("session metrics", func(context.Context) error { return stop() })
	return nil
}

// observeNodes reports each node's capacity and use: from the registry in
// a cluster, from the one local node otherwise.
func (s *setup) observeNodes(reg *cluster.Registry, local *placement.Local) error {
	stop, err := metrics.ObserveNodes(func(ctx context.Context) ([]metrics.NodeUsage, error) {
		if reg == nil {
			return []metrics.NodeUsage{{
				Node: s.cfg.NodeID, Alive: true,
				CapacitySessions: int64(s.cfg.NodeMaxSessions), UsedSessions: int64(local.Used()),
			}}, nil
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		nodes, err := reg.Snapshot(ctx, "")
		if err != nil {
			return nil, err
		}
		out := make([]metrics.NodeUsage, 0, len(nodes))
		for _, n := range nodes {
			out = append(out, metrics.NodeUsage{
				Node: n.ID, Alive: n.Alive, Draining: n.Draining,
				CapacitySessions: n.Capacity.Sessions, UsedSessions: n.Used.Sessions,
				CapacityCPUMillis: n.Capacity.CPUMillis, UsedCPUMillis: n.Used.CPUMillis,
				CapacityMemoryBytes: n.Capacity.MemoryBytes, UsedMemoryBytes: n.Used.MemoryBytes,
			})
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	s.closers.add("node metrics", func(context.Context) error { return stop() })
	return nil
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
