//go:build !nodeonly

// The agent role: runs against LLM providers, with their SDKs. A node-only
// build (-tags nodeonly, the node image's binary) leaves it out, and with it
// every LLM and cloud SDK: see nodeonly.go.

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/agent"
	"github.com/deskgrid/deskgrid/services/agent/lease"
	agentstore "github.com/deskgrid/deskgrid/services/agent/store"
	"github.com/deskgrid/deskgrid/services/platform/activity"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

// nodeOnly: this binary serves only a node's roles (see nodeonly.go).
const nodeOnly = false

// defaultProviderBaseURLs are the base URLs a run may name for its provider
// unless -provider-base-urls says otherwise.
var defaultProviderBaseURLs = agent.DefaultProviderBaseURLs

// addAgent starts the agent service. It reaches sessions' displays and
// sandboxes through the node (or, in a cluster, the node router), stores runs
// beside the other records and makes run events durable on JetStream.
func (s *setup) addAgent(ctx context.Context, srv *grpcserver.Server, nc *nats.Conn, js jetstream.JetStream, act *activity.Tracker) error {
	var nodes grpc.ClientConnInterface
	if s.clustered() {
		r, err := s.nodeRouter(ctx, true)
		if err != nil {
			return err
		}
		nodes = r
	} else {
		conn, err := s.internalDial(ctx, s.cfg.NodeAddr)
		if err != nil {
			return err
		}
		s.closers.add("agent node connection", func(context.Context) error { return conn.Close() })
		nodes = conn
	}
	sessConn, err := s.internalDial(ctx, s.cfg.SessionAddr)
	if err != nil {
		return err
	}
	s.closers.add("agent session connection", func(context.Context) error { return sessConn.Close() })
	dsn, err := s.storeDSN("agent.db")
	if err != nil {
		return err
	}
	st, err := agentstore.Open(ctx, dsn, s.logger.With("component", "agent-store"))
	if err != nil {
		return fmt.Errorf("agent store: %w", err)
	}
	s.closers.add("agent store", func(context.Context) error { return st.Close() })
	sealer, err := s.secretBox()
	if err != nil {
		return err
	}

	cfg := agent.DefaultConfig()
	cfg.Sealer = sealer
	// Only the all-in-one agent owns its store alone.
	cfg.RecoverInterruptedRuns = s.role == "up"
	cfg.APIKeys = map[string]string{}
	cfg.BaseURLs = map[string]string{}
	cfg.ProviderBaseURLs = splitList(s.cfg.ProviderBaseURLs)
	for name, p := range map[string]struct{ key, url string }{
		"anthropic": {s.cfg.AnthropicAPIKey, s.cfg.AnthropicBaseURL},
		"openai":    {s.cfg.OpenAIAPIKey, s.cfg.OpenAIBaseURL},
		"gemini":    {s.cfg.GeminiAPIKey, s.cfg.GeminiBaseURL},
	} {
		if p.key != "" {
			cfg.APIKeys[name] = p.key
		}
		if p.url != "" {
			cfg.BaseURLs[name] = p.url
		}
	}
	leases, err := s.inputLeases(ctx)
	if err != nil {
		return err
	}
	a, err := agent.New(ctx, cfg, agent.Deps{
		Logger:    s.logger.With("component", "agent"),
		Display:   displayv1.NewDisplayServiceClient(nodes),
		Sandbox:   sandboxv1.NewSandboxServiceClient(nodes),
		Sessions:  sessionv1.NewSessionServiceClient(sessConn),
		Store:     st,
		JetStream: js,
		Leases:    timedLeases{leases},
		Tenancy:   s.tenancy(),
		NATS:      nc,
		Activity:  act,
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	s.closers.add("agent", a.Close)
	if err := s.countEvents(js.Conn(), metrics.EventKinds{Runs: true, TenantUsage: s.cfg.MetricsTenantUsage}); err != nil {
		return err
	}
	a.Register(srv.GRPC)
	return nil
}

// inputLeases are the agent's input leases: one holder per session across
// every agent replica, fencing tokens that keep growing across restarts.
func (s *setup) inputLeases(ctx context.Context) (lease.Manager, error) {
	if !s.clustered() {
		return lease.NewMemory(nil), nil
	}
	rdb, err := s.redisClient(ctx)
	if err != nil {
		return nil, err
	}
	return lease.NewRedis(rdb, s.cfg.RedisPrefix)
}

// timedLeases records how long each input lease acquire waited.
type timedLeases struct{ lease.Manager }

func (t timedLeases) Acquire(ctx context.Context, sessionID, holder string, ttl time.Duration) (lease.Lease, error) {
	start := time.Now()
	l, err := t.Manager.Acquire(ctx, sessionID, holder, ttl)
	metrics.LeaseWaited(ctx, time.Since(start), err)
	return l, err
}
