//go:build !nodeonly

// The control plane's roles: session, history and the REST gateway (the
// agent's is in agent_role.go). A node-only build (-tags nodeonly) leaves
// them out, and with them history's and the gateway's code: see
// nodeonly.go.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deskgrid/deskgrid/gateway"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"github.com/deskgrid/deskgrid/sdk/mcpserver"
	"github.com/deskgrid/deskgrid/services/history"
	historystore "github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/activity"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/keystore"
	"github.com/deskgrid/deskgrid/services/platform/auth/quota"
	"github.com/deskgrid/deskgrid/services/platform/auth/viewer"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/session"
	"github.com/deskgrid/deskgrid/services/session/cluster"
	"github.com/deskgrid/deskgrid/services/session/placement"
	"github.com/deskgrid/deskgrid/services/session/state"
	sessionstore "github.com/deskgrid/deskgrid/services/session/store"
)

// addSession starts the session service. nodeLost, when set, marks every
// session the store still thinks runs on that node LOST: its node restarted.
func (s *setup) addSession(ctx context.Context, srv *grpcserver.Server, nc *nats.Conn, js jetstream.JetStream, nodeLost bool) (*session.Service, error) {
	dsn, err := s.storeDSN("sessions.db")
	if err != nil {
		return nil, err
	}
	st, err := sessionstore.Open(ctx, dsn, s.logger.With("component", "session-store"))
	if err != nil {
		return nil, fmt.Errorf("session store: %w", err)
	}
	s.closers.add("session store", func(context.Context) error { return st.Close() })
	var (
		placer placement.Placer
		nodes  session.Nodes
		reg    *cluster.Registry
		conns  *cluster.NodeConns
		local  *placement.Local
	)
	if s.clustered() {
		// Cluster mode: nodes come from the registry; placement reserves
		// there, so any number of session replicas may run.
		if reg, err = s.registry(ctx); err != nil {
			return nil, err
		}
		placer = cluster.NewPlacer(reg, cluster.PlacerConfig{K: s.cfg.PlacementK, TenantAntiAffinity: s.cfg.TenantAntiAffinity})
		dopts, err := s.internalDialOptions(ctx)
		if err != nil {
			return nil, err
		}
		conns = cluster.NewNodeConns(reg, append(dopts, telemetryDialOptions()...)...)
		s.closers.add("node connections", func(context.Context) error { return conns.Close() })
		nodes = conns
	} else {
		conn, err := s.internalDial(ctx, s.cfg.NodeAddr)
		if err != nil {
			return nil, err
		}
		s.closers.add("node connection", func(context.Context) error { return conn.Close() })
		local = placement.NewLocal(placement.Node{ID: s.cfg.NodeID, Address: s.cfg.NodeAddr}, s.cfg.NodeMaxSessions)
		placer = local
		nodes = staticNodes{id: s.cfg.NodeID, conn: conn}
	}

	cfg := session.DefaultConfig()
	cfg.DefaultTTL = s.cfg.DefaultTTL
	cfg.MaxTTL = s.cfg.MaxTTL
	cfg.DefaultIdleTimeout = s.cfg.DefaultIdleTimeout
	cfg.CreateTimeout = s.cfg.CreateTimeout
	cfg.ReapInterval = s.cfg.ReapInterval
	cfg.Desktop = strings.Fields(s.cfg.WindowManager)
	cfg.DefaultImage = s.cfg.DefaultImage
	cfg.TenantQuota = quota.Amount{Sessions: s.cfg.TenantMaxSessions, CPUMillis: s.cfg.TenantMaxCPUMillis, MemoryBytes: s.cfg.TenantMaxMemoryBytes}
	// The nodes' and the agent's reports of use, for the idle reaper.
	usage, err := activity.NewMonitor(activity.MonitorConfig{Interval: s.cfg.ActivityInterval},
		activity.MonitorDeps{NATS: nc, Logger: s.logger.With("component", "activity")})
	if err != nil {
		return nil, err
	}
	s.closers.add("activity monitor", usage.Close)
	svc, err := session.New(ctx, cfg, session.Deps{
		Activity: usage,
		Logger:   s.logger.With("component", "session"),
		Store:    st,
		Placer:   placer,
		Nodes:    nodes,
		Events:   events.NewPublisher(js),
		NATS:     nc,
		Tenancy:  s.tenancy(),
		// Placement prefers a node holding the session's image.
		ImageKeys: s.sessionImageKeys,
	})
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	s.closers.add("session", svc.Close)
	if err := s.observeSessions(st); err != nil {
		return nil, err
	}
	if err := s.observeNodes(reg, local); err != nil {
		return nil, err
	}
	if nc != nil {
		if err := s.countEvents(nc, metrics.EventKinds{Sessions: true}); err != nil {
			return nil, err
		}
	}
	if nodeLost {
		n, err := svc.MarkNodeSessionsLost(ctx, s.cfg.NodeID, "node restarted")
		if err != nil {
			return nil, fmt.Errorf("session: mark sessions of the previous run lost: %w", err)
		}
		if n > 0 {
			s.logger.Warn("sessions of a previous run are lost", "count", n)
		}
	}
	if reg != nil {
		// Every replica watches: marking LOST is a generation-checked
		// write, so replicas racing on one node do no harm.
		w := cluster.WatchWith(reg, cluster.WatchConfig{
			Interval: s.cfg.HeartbeatInterval / 2,
			// After Redis comes back, a live node heartbeats again within
			// its TTL (the next tick, plus the call).
			Grace:  max(s.cfg.HeartbeatTTL, 3*s.cfg.HeartbeatInterval/2),
			Logger: s.logger.With("component", "node-watcher"),
			Lost: func(ctx context.Context, nodeID string) error {
				conns.Forget(nodeID)
				_, err := svc.MarkNodeSessionsLost(ctx, nodeID, "node heartbeat expired")
				return err
			},
			Ended: svc.SessionEnded,
			// Redis is a cache of placement; the records are the truth.
			Records: func(ctx context.Context) ([]cluster.Assignment, error) {
				placed, err := svc.Placed(ctx)
				out := make([]cluster.Assignment, 0, len(placed))
				for _, p := range placed {
					out = append(out, cluster.Assignment{SessionID: p.GetId(), NodeID: p.GetNodeId(), Tenant: p.GetTenant(),
						CPUMillis: p.GetLimits().GetCpuMillis(), Memory: p.GetLimits().GetMemoryBytes()})
				}
				return out, err
			},
		})
		s.closers.add("node watcher", w.Close)
		nodeSvc := cluster.NewNodeService(reg, conns, s.logger.With("component", "nodes"))
		nodeSvc.Register(srv.GRPC)
		// Each node keeps its own images: image calls name a node, and a
		// list or get that names none asks every live node.
		cluster.NewImageProxy(nodeSvc).Register(srv.GRPC)
		srv.SetServing(imagev1.ImageService_ServiceDesc.ServiceName)
	} else {
		// One machine: its one node, drained and undrained like a cluster's.
		cluster.NewNodeService(cluster.LocalNodes{Local: local}, nodes.(staticNodes), s.logger.With("component", "nodes")).Register(srv.GRPC)
	}
	svc.Register(srv.GRPC)
	return svc, nil
}

func (s *setup) addHistory(ctx context.Context, srv *grpcserver.Server, js jetstream.JetStream) error {
	dsn, err := s.storeDSN("history.db")
	if err != nil {
		return err
	}
	st, err := historystore.Open(ctx, dsn)
	if err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	s.closers.add("history store", func(context.Context) error { return st.Close() })
	cfg := history.DefaultConfig()
	cfg.StreamMaxAge = eventRetention
	cfg.BlobDir = filepath.Join(s.cfg.DataDir, "blobs")
	h, err := history.New(ctx, cfg, history.Deps{Logger: s.logger.With("component", "history"), Store: st, JS: js, Tenancy: s.tenancy()})
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	s.closers.add("history", h.Close)
	h.Register(srv.GRPC)
	if err := s.observeBlobs(cfg.BlobDir); err != nil {
		return err
	}
	stopIngest, err := metrics.ObserveHistoryIngest(func() metrics.HistoryIngest {
		st := h.IngestStats()
		return metrics.HistoryIngest{Stored: int64(st.Stored), Duplicates: int64(st.Duplicates), Rejected: int64(st.Rejected), StoreFailures: int64(st.StoreFailures)}
	})
	if err != nil {
		return err
	}
	s.closers.add("history ingest metrics", func(context.Context) error { return stopIngest() })
	return s.observeConsumers(js)
}

// startGateway serves REST on cfg.HTTPAddr, forwarding to the configured addresses.
func (s *setup) startGateway(ctx context.Context) (string, error) {
	conns := map[string]*grpc.ClientConn{}
	get := func(addr string) (*grpc.ClientConn, error) {
		if c, ok := conns[addr]; ok {
			return c, nil
		}
		counted, err := s.countedDialOption(ctx)
		if err != nil {
			return nil, err
		}
		c, err := dial(addr, counted...)
		if err != nil {
			return nil, err
		}
		conns[addr] = c
		s.closers.add("gateway connection "+addr, func(context.Context) error { return c.Close() })
		return c, nil
	}
	var b gateway.Backends
	backends := []struct {
		addr string
		dst  *grpc.ClientConnInterface
	}{{s.cfg.SessionAddr, &b.Session}, {s.cfg.AgentAddr, &b.Agent}, {s.cfg.HistoryAddr, &b.History}}
	// Node calls carry the internal token besides the caller's key: the
	// live view reaches the node as the system acting for the viewer
	// token's tenant. Its own connection, so no other backend call can go
	// out as the system.
	if s.clustered() {
		// Each session's display and sandbox calls go to its own node.
		r, err := s.nodeRouter(ctx, true)
		if err != nil {
			return "", err
		}
		b.Node = r
	} else {
		c, err := s.internalDial(ctx, s.cfg.NodeAddr)
		if err != nil {
			return "", err
		}
		s.closers.add("gateway node connection", func(context.Context) error { return c.Close() })
		b.Node = c
	}
	for _, x := range backends {
		c, err := get(x.addr)
		if err != nil {
			return "", err
		}
		*x.dst = c
	}
	if s.clustered() {
		// Each node keeps its own images; the session service sends an
		// image call to the node it names, or asks every live node.
		b.Image = b.Session
	}
	images := b.Image
	if images == nil {
		images = b.Node
	}
	// The MCP endpoint drives deskgrid through the Go SDK over the same backends.
	client := deskgrid.NewWithConn(serviceConns{
		"deskgrid.session.v1.": b.Session, "deskgrid.display.v1.": b.Node, "deskgrid.sandbox.v1.": b.Node, "deskgrid.image.v1.": images,
		"deskgrid.agent.v1.": b.Agent, "deskgrid.history.v1.": b.History,
	})
	deps := gateway.Deps{
		Logger:   s.logger.With("component", "gateway"),
		Backends: b,
		Metrics:  s.tel.Metrics,
		MCP:      mcpserver.HTTPHandler(client, version),
	}
	if err := s.gatewayAuth(ctx, &deps); err != nil {
		return "", err
	}
	g, err := gateway.New(ctx, gateway.DefaultConfig(), deps)
	if err != nil {
		return "", err
	}
	hs, lis, err := s.httpServer(g.Handler())
	if err != nil {
		return "", err
	}
	// Live viewers hold upgraded connections that the HTTP server's Shutdown
	// does not see; the gateway ends them first.
	s.closers.add("gateway", g.Close)
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("HTTP server", "err", err)
		}
	}()
	return lis.Addr().String(), nil
}

// serviceConns sends each call to the connection of its service, chosen by
// the full method name's package prefix.
type serviceConns map[string]grpc.ClientConnInterface

func (m serviceConns) pick(method string) (grpc.ClientConnInterface, error) {
	for prefix, cc := range m {
		if strings.HasPrefix(strings.TrimPrefix(method, "/"), prefix) {
			return cc, nil
		}
	}
	return nil, status.Errorf(codes.Unimplemented, "no backend serves %s", method)
}

func (m serviceConns) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	cc, err := m.pick(method)
	if err != nil {
		return err
	}
	return cc.Invoke(ctx, method, args, reply, opts...)
}

func (m serviceConns) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cc, err := m.pick(method)
	if err != nil {
		return nil, err
	}
	return cc.NewStream(ctx, desc, method, opts...)
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

// gatewayAuth gives the gateway the verifier, viewer tokens for the live
// view and the per-key rate limit, when -auth is on.
func (s *setup) gatewayAuth(ctx context.Context, deps *gateway.Deps) error {
	a, err := s.authOn(ctx)
	if err != nil || a == nil {
		return err
	}
	keys := []viewer.SigningKey{viewer.NewSigningKey("local")}
	if s.cfg.ViewerKeys != "" {
		if keys, err = viewer.ParseKeys(s.cfg.ViewerKeys); err != nil {
			return fmt.Errorf("-viewer-keys: %w", err)
		}
	} else if s.role != "up" {
		return errors.New("-viewer-keys is required with -auth outside deskgrid up (the same on every gateway)")
	}
	rev, err := s.viewerRevocations(ctx)
	if err != nil {
		return err
	}
	iss, err := viewer.New(viewer.Config{Keys: keys}, rev)
	if err != nil {
		return err
	}
	deps.Verifier = a.verifier
	deps.Viewer = iss
	deps.NodeCredentials = auth.ActAs
	deps.MetricsNeedKey = s.cfg.MetricsNeedKey
	deps.RateLimit = a.limiter
	return nil
}

// firstKey makes the first admin key when none ever existed, prints it once
// and keeps it in the data dir for the CLI on this machine.
func (s *setup) firstKey(ctx context.Context, stdout io.Writer) error {
	a, err := s.authOn(ctx)
	if err != nil || a == nil {
		return err
	}
	key, created, err := a.keys.EnsureFirstKey(ctx)
	if err != nil {
		return fmt.Errorf("first API key: %w", err)
	}
	if !created {
		return nil
	}
	path := filepath.Join(s.cfg.DataDir, adminKeyFile)
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return fmt.Errorf("save the first API key: %w", err)
	}
	fmt.Fprintf(stdout, "\nThe first API key (tenant %q, admin), shown once and kept in %s:\n\n  %s\n\nSend it as 'Authorization: Bearer <key>'; the CLI reads it from DESKGRID_API_KEY or that file.\n\n", keystore.DefaultTenant, path, key)
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

// eventRetention is how long the event stream keeps events; history keeps
// them for good once it has stored them.
const eventRetention = 7 * 24 * time.Hour

// staticNodes reaches the one node this version places on.
type staticNodes struct {
	id   string
	conn *grpc.ClientConn
}

func (n staticNodes) Display(nodeID string) (displayv1.DisplayServiceClient, error) {
	if nodeID != n.id {
		return nil, fmt.Errorf("unknown node %q", nodeID)
	}
	return displayv1.NewDisplayServiceClient(n.conn), nil
}

func (n staticNodes) Sandbox(nodeID string) (sandboxv1.SandboxServiceClient, error) {
	if nodeID != n.id {
		return nil, fmt.Errorf("unknown node %q", nodeID)
	}
	return sandboxv1.NewSandboxServiceClient(n.conn), nil
}

func (n staticNodes) Image(nodeID string) (imagev1.ImageServiceClient, error) {
	if nodeID != n.id {
		return nil, fmt.Errorf("unknown node %q", nodeID)
	}
	return imagev1.NewImageServiceClient(n.conn), nil
}

// sessionImageKeys name a session's image as the nodes report theirs: the
// reference normalised as the image store does, under the tenant the nodes
// keep the caller's tags under (none without authentication).
func (s *setup) sessionImageKeys(tenant, ref string) []string {
	if !s.cfg.Auth {
		tenant = ""
	}
	if r, err := image.ParseRef(ref); err == nil {
		ref = r.Name
	}
	return placement.ImageKeys(tenant, ref)
}

func (s *setup) httpServer(h http.Handler) (*http.Server, net.Listener, error) {
	lis, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("HTTP listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	s.closers.add("HTTP server", srv.Shutdown)
	return srv, lis, nil
}

// viewerRevocations are the revoked viewer links, seen by every gateway.
func (s *setup) viewerRevocations(ctx context.Context) (viewer.Revocations, error) {
	if !s.clustered() {
		return viewer.NewMemory(), nil
	}
	rdb, err := s.redisClient(ctx)
	if err != nil {
		return nil, err
	}
	return viewer.NewRedis(rdb, s.cfg.RedisPrefix), nil
}
