package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"github.com/deskgrid/deskgrid/sdk/mcpserver"
	"github.com/deskgrid/deskgrid/services/display"
	"github.com/deskgrid/deskgrid/services/history"
	historystore "github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/activity"
	"github.com/deskgrid/deskgrid/services/platform/auth/quota"
	"github.com/deskgrid/deskgrid/services/platform/auth/secretbox"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/platform/noderoute"
	"github.com/deskgrid/deskgrid/services/platform/videostore"
	"github.com/deskgrid/deskgrid/services/sandbox"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/session"
	"github.com/deskgrid/deskgrid/services/session/cluster"
	"github.com/deskgrid/deskgrid/services/session/placement"
	sessionstore "github.com/deskgrid/deskgrid/services/session/store"
)

// eventRetention is how long the event stream keeps events; history keeps
// them for good once it has stored them.
const eventRetention = 7 * 24 * time.Hour

// node is the display and sandbox of this machine.
type node struct {
	display *display.Service
	sandbox *sandbox.Service
	// The same services through this process's gRPC server (cluster mode).
	displays  displayv1.DisplayServiceClient
	sandboxes sandboxv1.SandboxServiceClient
	// pools keep desktops started ahead of demand, one per image.
	pools desktopPools
	// images is the node's image store (nil on a node without a sandbox).
	images *image.Store
}

// addNode starts the display and sandbox services on srv. With reconcile, it
// first removes whatever a previous process on this machine left behind
// (every session on it is gone with that process in the all-in-one mode).
//
// With js, the display records sessions' screens and hands the videos to
// the history through it; without, recording is refused.
func (s *setup) addNode(ctx context.Context, srv *grpcserver.Server, js jetstream.JetStream, withDisplay, withSandbox bool) (*node, error) {
	n := &node{}
	warm, err := warmImages(s.cfg.WarmDesktops, s.cfg.DefaultImage, s.cfg.WarmImages)
	if err != nil {
		return nil, err
	}
	if withDisplay {
		dc := display.DefaultConfig()
		dc.RuntimeDir = s.cfg.RuntimeDir
		dc.WarmDisplays = s.cfg.WarmDisplays
		dc.FirstDisplay = s.cfg.FirstDisplay
		// Videos are written on the node's disk while recorded.
		dc.RecordingDir = filepath.Join(s.cfg.DataDir, "recordings")
		deps := display.Deps{Logger: s.logger.With("component", "display"), Tenancy: s.tenancy()}
		if js != nil {
			videos, err := videostore.Open(ctx, js)
			if err != nil {
				return nil, err
			}
			deps.Events, deps.Videos = events.NewPublisher(js), videos
		}
		d, err := display.New(ctx, dc, deps)
		if err != nil {
			return nil, fmt.Errorf("display: %w", err)
		}
		s.closers.add("display", d.Close)
		if removed, err := d.Reconcile(ctx, nil); err != nil {
			return nil, fmt.Errorf("display: clean up after the previous run: %w", err)
		} else if len(removed) > 0 {
			metrics.Reconciled(ctx, "display", len(removed))
			s.logger.Info("removed displays left by a previous run", "sessions", removed)
		}
		// Recordings a dead previous process left end now, as failed, with
		// their videos so far.
		if n, err := d.RecoverRecordings(ctx); err != nil {
			s.logger.Warn("ending recordings left by a previous run", "err", err)
		} else if n > 0 {
			s.logger.Info("ended recordings left by a previous run", "recordings", n)
		}
		d.Register(srv.GRPC)
		srv.SetServing(displayv1.DisplayService_ServiceDesc.ServiceName)
		n.display = d
	}
	if withSandbox {
		sc := sandbox.DefaultConfig()
		sc.Root = filepath.Join(s.cfg.DataDir, "sandbox")
		// Named for the data dir: deskgrids sharing a machine (nodes side by
		// side, tests) each reconcile only their own cgroups.
		sc.CgroupParent = "deskgrid-" + shortHash(sc.Root)
		sc.WorkspaceRoots = splitList(s.cfg.WorkspaceRoots)
		sc.Limits.DiskBytes = s.cfg.SessionDiskBytes
		// The node's image store: layers unpacked once, shared by its sessions.
		images, err := image.New(ctx, image.Deps{Dir: filepath.Join(s.cfg.DataDir, "images"), Logger: s.logger.With("component", "images")})
		if err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
		s.ensureDefaultImage(ctx, images)
		stopStore, err := metrics.ObserveImageStore(s.cfg.NodeID, imageStoreUsage(images, filepath.Join(s.cfg.DataDir, "images")))
		if err != nil {
			return nil, err
		}
		s.closers.add("image store metrics", func(context.Context) error { return stopStore() })
		n.images = images
		deps := sandbox.Deps{Logger: s.logger.With("component", "sandbox"), Tenancy: s.tenancy(), Images: images}
		if n.display != nil {
			deps.DisplayLookup = n.display.Lookup
			// The display holds the session's input lease: the sandbox's
			// input (accessibility acts, launches) asks it, as its own
			// actions do.
			deps.InputFence = n.display.Fence
			// The accessibility tree of a window starts from the display's
			// list of them.
			display := n.display
			deps.Windows = func(ctx context.Context, sessionID string) ([]*displayv1.Window, error) {
				resp, err := display.ListWindows(ctx, &displayv1.ListWindowsRequest{SessionId: sessionID})
				return resp.GetWindows(), err
			}
		}
		b, err := sandbox.New(ctx, sc, deps)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		s.closers.add("sandbox", b.Close)
		stopLimits, err := metrics.ObserveSandboxLimits(s.cfg.NodeID, func() metrics.SandboxLimitEvents {
			ev := b.LimitEvents()
			return metrics.SandboxLimitEvents{OOMKills: int64(ev.OOMKills), PidsLimitHits: int64(ev.PidsLimitHits), DiskFull: int64(ev.DiskFull)}
		})
		if err != nil {
			return nil, err
		}
		s.closers.add("sandbox limit metrics", func(context.Context) error { return stopLimits() })
		if removed, err := b.Reconcile(ctx, nil); err != nil {
			return nil, fmt.Errorf("sandbox: clean up after the previous run: %w", err)
		} else if len(removed) > 0 {
			metrics.Reconciled(ctx, "sandbox", len(removed))
			s.logger.Info("removed sandboxes left by a previous run", "sessions", removed)
		}
		b.Register(srv.GRPC)
		srv.SetServing(sandboxv1.SandboxService_ServiceDesc.ServiceName)
		if n.display != nil {
			def := session.DefaultConfig()
			spec := sandbox.DisplaySpec{Width: int(def.DefaultWidth), Height: int(def.DefaultHeight), Depth: int(def.DefaultDepth)}
			argv := session.DesktopArgv(strings.Fields(s.cfg.WindowManager), true)
			for _, w := range warm {
				n.pools = append(n.pools, newDesktopPool(w.count, w.ref, spec, argv, n.display, b,
					s.logger.With("component", "warm-desktops", "image", w.ref)))
			}
			if len(n.pools) > 0 {
				b.SetWarmDesktops(n.pools)
				s.closers.add("warm desktops", n.pools.Close)
			}
		}
		is, err := sandbox.NewImageServer(sandbox.ImageDeps{Store: images, Logger: s.logger.With("component", "images"), Tenancy: s.tenancy()})
		if err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
		is.Register(srv.GRPC)
		srv.SetServing(imagev1.ImageService_ServiceDesc.ServiceName)
		n.sandbox = b
	}
	return n, nil
}

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

func (s *setup) storeDSN(file string) (string, error) {
	if s.cfg.PostgresURL != "" {
		return s.cfg.PostgresURL, nil
	}
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	return filepath.Join(s.cfg.DataDir, file), nil
}

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

// clustered: this process runs one role of a cluster, with a registry.
func (s *setup) clustered() bool {
	return s.cfg.RedisURL != "" && s.role != "up"
}

// registry connects to the cluster registry in Redis.
func (s *setup) registry(ctx context.Context) (*cluster.Registry, error) {
	rdb, err := s.redisClient(ctx)
	if err != nil {
		return nil, err
	}
	return cluster.NewRegistry(rdb, s.cfg.RedisPrefix), nil
}

// joinCluster registers this node and heartbeats until shutdown. Whenever
// it (re)joins, it keeps only the sessions the session map gives it.
//
// self is this process's own gRPC address: the sessions it runs are listed
// and deleted through its own API, as the control plane would.
func (s *setup) joinCluster(ctx context.Context, n *node, self string) error {
	reg, err := s.registry(ctx)
	if err != nil {
		return err
	}
	conn, err := s.internalDial(ctx, self)
	if err != nil {
		return err
	}
	s.closers.add("node self connection", func(context.Context) error { return conn.Close() })
	n.displays = displayv1.NewDisplayServiceClient(conn)
	n.sandboxes = sandboxv1.NewSandboxServiceClient(conn)
	labels, err := parseLabels(s.cfg.NodeLabels)
	if err != nil {
		return fmt.Errorf("-node-labels: %w", err)
	}
	m, err := cluster.Join(ctx, reg, cluster.MemberConfig{
		Node: cluster.NodeInfo{
			ID:      s.cfg.NodeID,
			Address: s.cfg.NodeAddr,
			Capacity: placement.Capacity{
				Sessions:    int64(s.cfg.NodeMaxSessions),
				CPUMillis:   s.cfg.NodeCPUMillis,
				MemoryBytes: s.cfg.NodeMemoryBytes,
			},
			Labels: labels,
		},
		Interval: s.cfg.HeartbeatInterval,
		TTL:      s.cfg.HeartbeatTTL,
		Images:   n.imageKeys,
	}, s.logger.With("component", "cluster"), n.reconcile)
	if err != nil {
		return err
	}
	// Leaving at shutdown ends the heartbeat at once: the control plane
	// marks this node's sessions LOST without waiting for the TTL.
	s.closers.add("cluster membership", func(ctx context.Context) error { return m.Close(ctx, true) })
	stopAge, err := metrics.ObserveHeartbeat(s.cfg.NodeID, m.LastHeartbeat)
	if err != nil {
		return err
	}
	s.closers.add("heartbeat age metric", func(context.Context) error { return stopAge() })
	return nil
}

// imageKeys are the keys of the images this node holds, which placement
// prefers for sessions of those images.
func (n *node) imageKeys(ctx context.Context) ([]string, error) {
	if n.images == nil {
		return nil, nil
	}
	tags, err := n.images.Tags(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, t := range tags {
		keys = append(keys, placement.HeldImageKeys(t.Tenant, t.Ref, t.Digest, t.Public)...)
	}
	return keys, nil
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

// reconcile removes every display and sandbox on this node whose session
// keep does not hold: those this process runs (its heartbeat lapsed and
// the control plane gave them up) and those an earlier process left.
func (n *node) reconcile(ctx context.Context, keep map[string]bool) error {
	var errs []error
	if n.display != nil {
		list, err := n.displays.ListDisplays(ctx, &displayv1.ListDisplaysRequest{})
		if err != nil {
			errs = append(errs, err)
		}
		for _, d := range list.GetDisplays() {
			if !keep[d.GetSessionId()] && !n.pools.owns(d.GetSessionId()) {
				if _, err := n.displays.DeleteDisplay(ctx, &displayv1.DeleteDisplayRequest{SessionId: d.GetSessionId()}); err != nil {
					errs = append(errs, err)
				} else {
					metrics.Reconciled(ctx, "display", 1)
				}
			}
		}
		if removed, err := n.display.Reconcile(ctx, func(id string) bool { return keep[id] }); err != nil {
			errs = append(errs, err)
		} else {
			metrics.Reconciled(ctx, "display", len(removed))
		}
	}
	if n.sandbox != nil {
		list, err := n.sandboxes.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{})
		if err != nil {
			errs = append(errs, err)
		}
		for _, b := range list.GetSandboxes() {
			if !keep[b.GetSessionId()] && !n.pools.owns(b.GetSessionId()) {
				if _, err := n.sandboxes.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: b.GetSessionId()}); err != nil {
					errs = append(errs, err)
				} else {
					metrics.Reconciled(ctx, "sandbox", 1)
				}
			}
		}
		if removed, err := n.sandbox.Reconcile(ctx, func(id string) bool { return keep[id] }); err != nil {
			errs = append(errs, err)
		} else {
			metrics.Reconciled(ctx, "sandbox", len(removed))
		}
	}
	return errors.Join(errs...)
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

// secretBox seals secrets at rest (provider keys runs bring). Its keys:
// -secret-key when set, either one key (base64 of 32 bytes, id "default")
// or, to rotate, "id:key,id:key" with the current key first (older keys
// keep opening what they sealed); else a key made once and kept in the data
// dir, readable only by deskgrid, also with id "default".
func (s *setup) secretBox() (*secretbox.Box, error) {
	var keys []secretbox.Key
	switch {
	case strings.Contains(s.cfg.SecretKey, ":"):
		k, err := secretbox.ParseKeys(s.cfg.SecretKey)
		if err != nil {
			return nil, fmt.Errorf("-secret-key: %w", err)
		}
		keys = k
	default:
		k, err := s.secretKey()
		if err != nil {
			return nil, err
		}
		keys = []secretbox.Key{{ID: "default", Secret: k}}
	}
	return secretbox.New(keys...)
}

// secretKey is the 32-byte key that seals secrets at rest (provider keys runs
// bring): -secret-key (base64) when set, else a key made once and kept in the
// data dir, readable only by deskgrid.
func (s *setup) secretKey() ([]byte, error) {
	if s.cfg.SecretKey != "" {
		k, err := base64.StdEncoding.DecodeString(s.cfg.SecretKey)
		if err != nil || len(k) != 32 {
			return nil, fmt.Errorf("-secret-key: want 32 bytes in base64")
		}
		return k, nil
	}
	path := filepath.Join(s.cfg.DataDir, "secret.key")
	if b, err := os.ReadFile(path); err == nil {
		if len(b) != 32 {
			return nil, fmt.Errorf("%s: want 32 bytes, found %d", path, len(b))
		}
		return b, nil
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, k, 0o600); err != nil {
		return nil, err
	}
	if err := os.Link(tmp, path); err != nil {
		os.Remove(tmp)
		if os.IsExist(err) {
			// Another process made it first: use theirs.
			return os.ReadFile(path)
		}
		return nil, err
	}
	os.Remove(tmp)
	s.logger.Info("made a new secret key for secrets at rest", "path", path)
	return k, nil
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

// nodeRouter reaches the node of each session by the session map, for the
// roles that call displays and sandboxes by session (gateway, agent) in a
// cluster. With -nats-url, session events drop cached entries at once;
// without, they expire after a few seconds. internal calls go as the system
// (the agent); the gateway's carry the caller's own key.
func (s *setup) nodeRouter(ctx context.Context, internal bool) (*noderoute.Router, error) {
	reg, err := s.registry(ctx)
	if err != nil {
		return nil, err
	}
	dopts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcserver.MaxMessageBytes), grpc.MaxCallSendMsgSize(grpcserver.MaxMessageBytes))}
	if internal {
		if dopts, err = s.internalDialOptions(ctx); err != nil {
			return nil, err
		}
	}
	dopts = append(dopts, telemetryDialOptions()...)
	r, err := noderoute.New(noderoute.Options{
		Resolver:    reg.RouteResolver(),
		DialOptions: dopts,
		Logger:      s.logger.With("component", "node-router"),
		Health:      reg.Ping,
	})
	if err != nil {
		return nil, err
	}
	s.closers.add("node router", func(context.Context) error { return r.Close() })
	if s.cfg.NATSURL != "" {
		nc, _, err := s.natsConn(ctx, false)
		if err != nil {
			return nil, err
		}
		sub, err := r.Subscribe(nc, events.SubjectPrefix)
		if err != nil {
			return nil, err
		}
		s.closers.add("node router events", func(context.Context) error { return sub.Unsubscribe() })
	}
	return r, nil
}

// shortHash names a path in a few characters.
func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}

// defaultImage is the image of sessions that name none: the desktop that
// scripts/setup builds (deploy/images/desktop).
const defaultImage = "deskgrid/desktop:latest"

// ensureDefaultImage makes -default-image runnable on this node: kept when
// the store has it, imported (public to every tenant) from
// -default-image-dir when not. When neither works, sessions that name no
// image run on the node's own programs, and the log says why.
func (s *setup) ensureDefaultImage(ctx context.Context, images *image.Store) {
	ref := s.cfg.DefaultImage
	if ref == "" {
		return
	}
	if _, err := images.Resolve(ctx, "", ref); err == nil {
		return
	}
	dir := s.cfg.DefaultImageDir
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		s.logger.Warn("the default image is not on this node and there is none to import: sessions that name no image run on the node's own programs (build it with scripts/setup, or set -default-image)", "image", ref, "dir", dir)
		s.cfg.DefaultImage = ""
		return
	}
	s.logger.Info("importing the default image (once per node)", "image", ref, "from", dir)
	if _, err := images.ImportPath(ctx, "", dir, image.ImportOptions{Ref: ref}); err != nil {
		s.logger.Error("import the default image: sessions that name no image run on the node's own programs", "image", ref, "from", dir, "error", err)
		s.cfg.DefaultImage = ""
		return
	}
	if err := images.SetPublic(ctx, "", ref, true); err != nil {
		s.logger.Warn("make the default image public", "image", ref, "error", err)
	}
}
