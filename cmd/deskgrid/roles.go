package main

import (
	"context"
	"fmt"
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
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"github.com/deskgrid/deskgrid/sdk/mcpserver"
	"github.com/deskgrid/deskgrid/services/agent"
	"github.com/deskgrid/deskgrid/services/display"
	"github.com/deskgrid/deskgrid/services/history"
	historystore "github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
	"github.com/deskgrid/deskgrid/services/sandbox"
	"github.com/deskgrid/deskgrid/services/session"
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
}

// addNode starts the display and sandbox services on srv. With reconcile, it
// first removes whatever a previous process on this machine left behind
// (every session on it is gone with that process in the all-in-one mode).
func (s *setup) addNode(ctx context.Context, srv *grpcserver.Server, withDisplay, withSandbox bool) (*node, error) {
	n := &node{}
	if withDisplay {
		dc := display.DefaultConfig()
		dc.RuntimeDir = s.cfg.RuntimeDir
		dc.WarmDisplays = s.cfg.WarmDisplays
		dc.WindowManager = strings.Fields(s.cfg.WindowManager)
		d, err := display.New(ctx, dc, display.Deps{Logger: s.logger.With("component", "display")})
		if err != nil {
			return nil, fmt.Errorf("display: %w", err)
		}
		s.closers.add("display", d.Close)
		if removed, err := d.Reconcile(ctx, nil); err != nil {
			return nil, fmt.Errorf("display: clean up after the previous run: %w", err)
		} else if len(removed) > 0 {
			s.logger.Info("removed displays left by a previous run", "sessions", removed)
		}
		d.Register(srv.GRPC)
		srv.SetServing(displayv1.DisplayService_ServiceDesc.ServiceName)
		n.display = d
	}
	if withSandbox {
		sc := sandbox.DefaultConfig()
		sc.Root = filepath.Join(s.cfg.DataDir, "sandbox")
		sc.WorkspaceRoots = splitList(s.cfg.WorkspaceRoots)
		deps := sandbox.Deps{Logger: s.logger.With("component", "sandbox")}
		if n.display != nil {
			deps.DisplayLookup = n.display.Lookup
		}
		b, err := sandbox.New(ctx, sc, deps)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		s.closers.add("sandbox", b.Close)
		if removed, err := b.Reconcile(ctx, nil); err != nil {
			return nil, fmt.Errorf("sandbox: clean up after the previous run: %w", err)
		} else if len(removed) > 0 {
			s.logger.Info("removed sandboxes left by a previous run", "sessions", removed)
		}
		b.Register(srv.GRPC)
		srv.SetServing(sandboxv1.SandboxService_ServiceDesc.ServiceName)
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
	conn, err := dial(s.cfg.NodeAddr)
	if err != nil {
		return nil, err
	}
	s.closers.add("node connection", func(context.Context) error { return conn.Close() })

	cfg := session.DefaultConfig()
	cfg.DefaultTTL = s.cfg.DefaultTTL
	cfg.MaxTTL = s.cfg.MaxTTL
	cfg.DefaultIdleTimeout = s.cfg.DefaultIdleTimeout
	cfg.CreateTimeout = s.cfg.CreateTimeout
	svc, err := session.New(ctx, cfg, session.Deps{
		Logger: s.logger.With("component", "session"),
		Store:  st,
		Placer: placement.NewLocal(placement.Node{ID: s.cfg.NodeID, Address: s.cfg.NodeAddr}, s.cfg.NodeMaxSessions),
		Nodes:  staticNodes{id: s.cfg.NodeID, conn: conn},
		Events: events.NewPublisher(js),
		NATS:   nc,
	})
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	s.closers.add("session", svc.Close)
	if nodeLost {
		n, err := svc.MarkNodeSessionsLost(ctx, s.cfg.NodeID, "node restarted")
		if err != nil {
			return nil, fmt.Errorf("session: mark sessions of the previous run lost: %w", err)
		}
		if n > 0 {
			s.logger.Warn("sessions of a previous run are lost", "count", n)
		}
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
	h, err := history.New(ctx, cfg, history.Deps{Logger: s.logger.With("component", "history"), Store: st, JS: js})
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	s.closers.add("history", h.Close)
	h.Register(srv.GRPC)
	return nil
}

func (s *setup) addAgent(ctx context.Context, srv *grpcserver.Server) error {
	a, err := agent.New(ctx, agent.DefaultConfig(), agent.Deps{Logger: s.logger.With("component", "agent")})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	s.closers.add("agent", a.Close)
	a.Register(srv.GRPC)
	return nil
}

// startGateway serves REST on cfg.HTTPAddr, forwarding to the configured addresses.
func (s *setup) startGateway(ctx context.Context) (string, error) {
	conns := map[string]*grpc.ClientConn{}
	get := func(addr string) (*grpc.ClientConn, error) {
		if c, ok := conns[addr]; ok {
			return c, nil
		}
		c, err := dial(addr)
		if err != nil {
			return nil, err
		}
		conns[addr] = c
		s.closers.add("gateway connection "+addr, func(context.Context) error { return c.Close() })
		return c, nil
	}
	var b gateway.Backends
	for _, x := range []struct {
		addr string
		dst  *grpc.ClientConnInterface
	}{{s.cfg.SessionAddr, &b.Session}, {s.cfg.NodeAddr, &b.Node}, {s.cfg.AgentAddr, &b.Agent}, {s.cfg.HistoryAddr, &b.History}} {
		c, err := get(x.addr)
		if err != nil {
			return "", err
		}
		*x.dst = c
	}
	// The MCP endpoint drives deskgrid through the Go SDK over the same backends.
	client := deskgrid.NewWithConn(serviceConns{
		"deskgrid.session.v1.": b.Session, "deskgrid.display.v1.": b.Node, "deskgrid.sandbox.v1.": b.Node,
		"deskgrid.agent.v1.": b.Agent, "deskgrid.history.v1.": b.History,
	})
	g, err := gateway.New(ctx, gateway.DefaultConfig(), gateway.Deps{
		Logger:   s.logger.With("component", "gateway"),
		Backends: b,
		Metrics:  s.tel.Metrics,
		MCP:      mcpserver.HTTPHandler(client, version),
	})
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
		if err := hs.Serve(lis); err != nil && !strings.Contains(err.Error(), "Server closed") {
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
