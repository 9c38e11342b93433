// Package agent serves agent runs: an LLM-driven loop over a session's
// display and sandbox, on the provider and model each run chooses.
//
// A run streams its events (text, thinking, tool calls, screenshots, usage,
// state) with sequence numbers; readers resume from any number, recent
// events come from memory and older ones from the event stream. Runs take
// the session's input lease, so several agents on one desktop take turns.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/agent/internal/runlog"
	"github.com/deskgrid/deskgrid/services/agent/lease"
	"github.com/deskgrid/deskgrid/services/agent/store"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/secretbox"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

// Config configures the agent service.
type Config struct {
	// DefaultProvider is used when a run names none.
	DefaultProvider string
	// DefaultModels per provider name, used when a run names no model.
	DefaultModels map[string]string
	// APIKeys per provider, used when a run brings no key of its own.
	APIKeys map[string]string
	// BaseURLs per provider, used when a run names none.
	BaseURLs map[string]string
	// ProviderBaseURLs are the base URLs a run may name
	// (scheme://host[:port][/path], a port of "*" for any; a run's URL must
	// be one of them or beneath one), so a tenant cannot make the service
	// call internal addresses. BaseURLs are allowed besides. Nil in
	// means DefaultProviderBaseURLs; empty allows only BaseURLs.
	ProviderBaseURLs []string
	// AnthropicPlatform: "" (the API), "bedrock" or "vertex", with
	// CloudRegion and CloudProject for those (Vertex also serves Gemini).
	AnthropicPlatform string
	CloudRegion       string
	CloudProject      string

	MaxSteps        int
	MaxOutputTokens int
	KeepScreenshots int
	ApprovalTimeout time.Duration
	// InputLeaseTTL is the lease a run holds, renewed while it runs.
	InputLeaseTTL time.Duration
	// Retries of a transient provider error, with exponential backoff from RetryBackoff.
	Retries      int
	RetryBackoff time.Duration
	BashTimeout  time.Duration
	// EventRing is how many recent events of a run stay in memory.
	EventRing int
	// EventPublishPending bounds the run events published to JetStream and
	// not yet acknowledged, over all runs.
	EventPublishPending int
	// FinishedRunTTL is how long a finished run's events stay in memory.
	FinishedRunTTL time.Duration
	// Sealer seals the API keys runs bring (bound to the run id), so they
	// are stored encrypted and a run can be continued after a restart; it
	// opens keys sealed with any of its keys, so sealing keys rotate.
	// Nil: such keys live only in memory, and continuing the run after a
	// restart needs the key again (SendMessage answers FailedPrecondition).
	Sealer *secretbox.Box
	// RecoverInterruptedRuns marks FAILED, at start, the stored runs a
	// previous process left unfinished. Only for a store one agent service
	// uses alone (deskgrid up): replicas sharing it would fail each
	// other's runs.
	RecoverInterruptedRuns bool
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		DefaultProvider:  "anthropic",
		ProviderBaseURLs: slices.Clone(DefaultProviderBaseURLs),
		DefaultModels: map[string]string{
			"anthropic": "claude-sonnet-4-5",
			"openai":    "computer-use-preview",
			"gemini":    "gemini-2.5-computer-use-preview-10-2025",
		},
		MaxSteps:            50,
		MaxOutputTokens:     4096,
		KeepScreenshots:     3,
		ApprovalTimeout:     10 * time.Minute,
		InputLeaseTTL:       30 * time.Second,
		Retries:             5,
		RetryBackoff:        500 * time.Millisecond,
		BashTimeout:         2 * time.Minute,
		EventRing:           4096,
		EventPublishPending: 4096,
		FinishedRunTTL:      10 * time.Minute,
	}
}

// Deps are what the agent service uses.
type Deps struct {
	Logger *slog.Logger
	// Display and Sandbox reach the session's node.
	Display displayv1.DisplayServiceClient
	Sandbox sandboxv1.SandboxServiceClient
	// Store keeps runs (required; store.NewMemory for one process).
	Store store.Store
	// JetStream makes run events durable (published asynchronously in
	// batches to the events stream, which must exist) and replays those
	// older than the in-memory ring. nil: Publisher, if any, publishes them
	// one by one and nothing replays.
	JetStream jetstream.JetStream
	// Publisher is used only without JetStream; nil with both keeps events
	// in memory only.
	Publisher events.Publisher
	// Leases grants input leases (required): lease.NewRedis shared by every
	// replica of a cluster, lease.NewMemory for one process.
	Leases lease.Manager
	// NewProvider builds a run's provider; nil uses provider.New.
	NewProvider func(ctx context.Context, cfg provider.Config) (provider.Provider, error)
	// Sessions (required) is asked whether the caller's session exists and
	// is theirs (the call's metadata is passed on) before a run starts on
	// it and on every input lease call.
	Sessions sessionv1.SessionServiceClient
	// Tenancy says who a call acts for (auth.CallerOf with auth on, nil
	// with auth off, when every caller sees every run and runs belong to
	// auth.DefaultTenant). A run is seen only by its tenant, the system and,
	// with auth off, everyone; an anonymous caller sees none.
	Tenancy auth.Tenancy
	// NATS carries the sessions' state changes: a run whose session stops,
	// fails, is lost, deleted or suspended fails at once, with the reason.
	// nil: a run learns it only when its next tool call fails.
	NATS *nats.Conn
	// Activity, when set, holds a run's session in use while the run is in
	// progress (activity.Tracker), so it is never stopped as idle under it.
	Activity interface {
		Hold(sessionID string) (release func())
	}
}

// DefaultTenant owns the runs of a deskgrid without authentication.
const DefaultTenant = auth.DefaultTenant

// Service implements agentv1.AgentServiceServer.
type Service struct {
	agentv1.UnimplementedAgentServiceServer
	cfg      Config
	baseURLs []baseURLRule // parsed ProviderBaseURLs
	deps     Deps
	logger   *slog.Logger
	store    store.Store
	leases   lease.Manager
	replayer runlog.Replayer
	asyncJS  jetstream.JetStream
	sealer   *secretbox.Box
	tenancy  auth.Tenancy

	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	runs   map[string]*run
	closed bool
	// ended are sessions that ended lately (see sessionEnded).
	ended       map[string]endedAt
	endedPruned time.Time
	sessionSub  *nats.Subscription
	// models bounds the model label of the provider metrics.
	models metrics.ModelLabels
}

// New returns the agent service.
func New(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	def := DefaultConfig()
	if cfg.DefaultProvider == "" {
		cfg.DefaultProvider = def.DefaultProvider
	}
	if cfg.DefaultModels == nil {
		cfg.DefaultModels = def.DefaultModels
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = def.MaxSteps
	}
	if cfg.MaxOutputTokens <= 0 {
		cfg.MaxOutputTokens = def.MaxOutputTokens
	}
	if cfg.KeepScreenshots <= 0 {
		cfg.KeepScreenshots = def.KeepScreenshots
	}
	if cfg.ApprovalTimeout <= 0 {
		cfg.ApprovalTimeout = def.ApprovalTimeout
	}
	if cfg.InputLeaseTTL <= 0 {
		cfg.InputLeaseTTL = def.InputLeaseTTL
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = def.RetryBackoff
	}
	if cfg.EventRing <= 0 {
		cfg.EventRing = def.EventRing
	}
	if cfg.EventPublishPending <= 0 {
		cfg.EventPublishPending = def.EventPublishPending
	}
	if cfg.FinishedRunTTL <= 0 {
		cfg.FinishedRunTTL = def.FinishedRunTTL
	}
	l := deps.Logger
	if l == nil {
		l = slog.Default()
	}
	switch {
	case deps.Store == nil:
		return nil, errors.New("agent: Deps.Store is required")
	case deps.Leases == nil:
		return nil, errors.New("agent: Deps.Leases is required")
	case deps.Sessions == nil:
		return nil, errors.New("agent: Deps.Sessions is required")
	}
	if cfg.ProviderBaseURLs == nil {
		cfg.ProviderBaseURLs = slices.Clone(DefaultProviderBaseURLs)
	}
	rules, err := parseBaseURLRules(cfg.ProviderBaseURLs)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	s := &Service{cfg: cfg, baseURLs: rules, deps: deps, logger: l, store: deps.Store, leases: deps.Leases, tenancy: deps.Tenancy, runs: map[string]*run{}, models: metrics.ModelLabels{Max: metrics.DefaultModelLabels}}
	if deps.NewProvider == nil {
		s.deps.NewProvider = func(ctx context.Context, c provider.Config) (provider.Provider, error) { return provider.New(ctx, c) }
	}
	if deps.JetStream != nil {
		s.replayer = runlog.JetStreamReplayer{JS: deps.JetStream}
		js, err := runlog.NewAsyncJetStream(deps.JetStream, cfg.EventPublishPending)
		if err != nil {
			return nil, fmt.Errorf("agent event stream: %w", err)
		}
		s.asyncJS = js
	}
	s.sealer = cfg.Sealer
	if cfg.RecoverInterruptedRuns {
		if err := s.recoverInterrupted(ctx); err != nil {
			return nil, err
		}
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	if deps.NATS != nil {
		if s.sessionSub, err = s.watchSessions(deps.NATS); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Register adds the service to r.
func (s *Service) Register(r grpc.ServiceRegistrar) { agentv1.RegisterAgentServiceServer(r, s) }

// Close cancels every run still going, waits for them to record their end
// and for their events to reach the event stream.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	runs := make([]*run, 0, len(s.runs))
	for _, r := range s.runs {
		runs = append(runs, r)
	}
	s.mu.Unlock()
	if s.sessionSub != nil {
		_ = s.sessionSub.Unsubscribe()
	}
	s.stop()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, r := range runs {
		r.log.Finish()
		if err := r.log.Flush(ctx); err != nil {
			s.logger.Warn("run events not all stored", "run", r.id, "err", err)
		}
	}
	return nil
}

// recoverInterrupted records the end of runs whose process stopped before
// they finished.
func (s *Service) recoverInterrupted(ctx context.Context) error {
	runs, err := s.store.Unfinished(ctx)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	for _, r := range runs {
		r.State = agentv1.RunState_RUN_STATE_FAILED
		r.StateReason = "interrupted: the agent service stopped during the run"
		r.PendingToolCall = nil
		r.UpdateTime = timestamppb.Now()
		if err := s.store.Update(ctx, r); err != nil {
			return fmt.Errorf("agent: record interrupted run %s: %w", r.GetId(), err)
		}
		s.logger.Info("run interrupted by a restart marked failed", "run", r.GetId())
	}
	return nil
}

func newRunID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}
