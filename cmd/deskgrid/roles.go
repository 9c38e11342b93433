package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/display"
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
)

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

func (s *setup) storeDSN(file string) (string, error) {
	if s.cfg.PostgresURL != "" {
		return s.cfg.PostgresURL, nil
	}
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	return filepath.Join(s.cfg.DataDir, file), nil
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
