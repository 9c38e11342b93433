// Package session is deskgrid's session service: session records and their
// state machine, placement on a node, the display and sandbox that make up a
// desktop there, and the reaper that ends sessions past their TTL or idle
// timeout.
package session

import (
	"context"
	"errors"
	"fmt"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/quota"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/activity"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/session/placement"
	"github.com/deskgrid/deskgrid/services/session/store"
)

// Config is the session service's configuration.
type Config struct {
	// DefaultTTL applies when a create asks for none.
	DefaultTTL time.Duration
	// MaxTTL is the longest TTL a create may ask for.
	MaxTTL time.Duration
	// DefaultIdleTimeout applies when a create asks for none; zero means
	// such sessions never time out for idleness.
	DefaultIdleTimeout time.Duration
	// ReapInterval is how often expired and idle sessions are looked for;
	// zero or less turns the reaper off.
	ReapInterval time.Duration
	// CreateTimeout bounds a create from placement to the first screenshot.
	CreateTimeout time.Duration
	// StopTimeout bounds tearing a session down on its node.
	StopTimeout time.Duration
	// StaleAfter: a session left PENDING, STARTING or STOPPING this long was
	// abandoned by a process that died; the reaper stops it. Zero means
	// twice CreateTimeout.
	StaleAfter time.Duration
	// WatchResync is how often a watch re-reads the record, so it catches up
	// even if an event was lost.
	WatchResync time.Duration
	// TenantQuota bounds what one tenant's unfinished sessions may hold at
	// once (sessions, CPU and memory asked); zero fields are unlimited.
	// TenantQuotas overrides it per tenant.
	TenantQuota  quota.Amount
	TenantQuotas map[string]quota.Amount
	// Desktop, when set, is the program that starts a session's desktop
	// (such as openbox): it runs inside the session's sandbox, as the
	// session's user, on its display, whenever the desktop starts (create
	// and resume), before the session's autostart programs. Nothing drawn
	// on a session's screen runs on the host.
	Desktop []string
	// DefaultImage is the image of a session whose request names none and
	// no workspace (such as deskgrid/desktop:latest); empty: such sessions
	// run on the node's own programs. A session from an image starts the
	// image's desktop program (its org.deskgrid.session label) instead of
	// Desktop; Desktop runs when the image names none.
	DefaultImage string
	// Display defaults.
	DefaultWidth  int32
	DefaultHeight int32
	DefaultDepth  int32
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		DefaultTTL:         time.Hour,
		MaxTTL:             24 * time.Hour,
		DefaultIdleTimeout: 15 * time.Minute,
		ReapInterval:       5 * time.Second,
		CreateTimeout:      30 * time.Second,
		StopTimeout:        30 * time.Second,
		WatchResync:        10 * time.Second,
		DefaultWidth:       1280,
		DefaultHeight:      800,
		DefaultDepth:       24,
		TenantQuota:        quota.Amount{Sessions: DefaultTenantMaxSessions},
	}
}

// DefaultTenantMaxSessions bounds a tenant's unfinished sessions unless
// configured otherwise, so one tenant cannot take every node slot.
const DefaultTenantMaxSessions = 16

// Deps are what the service uses.
type Deps struct {
	Logger *slog.Logger
	// Store keeps the session records. Required.
	Store store.Store
	// Placer chooses nodes. Required.
	Placer placement.Placer
	// Nodes reaches display and sandbox on a node. Required.
	Nodes Nodes
	// Events publishes state changes; nil publishes nothing (watches then
	// see changes only at each WatchResync).
	Events events.Publisher
	// NATS carries the events WatchSession follows; nil falls back to
	// re-reading the record every WatchResync.
	NATS *nats.Conn
	// Tenancy says who a call acts for (auth.CallerOf with auth on, nil
	// with auth off, when every caller sees every session and sessions
	// belong to auth.DefaultTenant). A session is seen only by its tenant,
	// the system and, with auth off, everyone; an anonymous caller sees
	// none and may create none.
	Tenancy auth.Tenancy
	// Activity says which sessions are in use (activity.Monitor, fed by
	// the nodes' and the agent's reports); the reaper stops no session it
	// says is busy or was used within its idle timeout. nil: only create,
	// resume and keepalive count as use.
	Activity Activity
	// ImageKeys names a session's image (a reference or a digest) for
	// placement as nodes report the images they hold: the normalised
	// reference ("debian" is "docker.io/library/debian:latest") under the
	// tenant the nodes know the caller as. nil: placement.ImageKeys of the
	// image as written.
	ImageKeys func(tenant, image string) []string
}

// Activity is what the reports of sessions' use say (activity.Monitor).
type Activity interface {
	Session(id string) activity.State
	Forget(id string)
}

// DefaultTenant owns the sessions of a deskgrid without authentication.
const DefaultTenant = auth.DefaultTenant

// Service implements sessionv1.SessionServiceServer.
type Service struct {
	sessionv1.UnimplementedSessionServiceServer

	cfg     Config
	log     *slog.Logger
	store   store.Store
	placer  placement.Placer
	nodes   Nodes
	events  events.Publisher
	nc      *nats.Conn
	tenancy auth.Tenancy
	usage   Activity
	// imageKeys: Deps.ImageKeys.
	imageKeys func(tenant, image string) []string
	now       func() time.Time

	// done closes when Close starts; watches and the reaper end.
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

var _ sessionv1.SessionServiceServer = (*Service)(nil)

// New returns a service and starts its reaper.
func New(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	if deps.Store == nil || deps.Placer == nil || deps.Nodes == nil {
		return nil, errors.New("session: Store, Placer and Nodes are required")
	}
	def := DefaultConfig()
	if cfg.DefaultTTL <= 0 {
		cfg.DefaultTTL = def.DefaultTTL
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = def.MaxTTL
	}
	if cfg.DefaultTTL > cfg.MaxTTL {
		return nil, fmt.Errorf("session: DefaultTTL %s is longer than MaxTTL %s", cfg.DefaultTTL, cfg.MaxTTL)
	}
	if cfg.DefaultIdleTimeout < 0 {
		return nil, fmt.Errorf("session: DefaultIdleTimeout %s is negative", cfg.DefaultIdleTimeout)
	}
	if cfg.CreateTimeout <= 0 {
		cfg.CreateTimeout = def.CreateTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = def.StopTimeout
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 2 * cfg.CreateTimeout
	}
	if cfg.WatchResync <= 0 {
		cfg.WatchResync = def.WatchResync
	}
	if cfg.DefaultWidth == 0 {
		cfg.DefaultWidth = def.DefaultWidth
	}
	if cfg.DefaultHeight == 0 {
		cfg.DefaultHeight = def.DefaultHeight
	}
	if cfg.DefaultDepth == 0 {
		cfg.DefaultDepth = def.DefaultDepth
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.Default()
	}
	s := &Service{
		cfg:       cfg,
		log:       logger.With("service", "session"),
		store:     deps.Store,
		placer:    deps.Placer,
		nodes:     deps.Nodes,
		events:    deps.Events,
		nc:        deps.NATS,
		tenancy:   deps.Tenancy,
		usage:     deps.Activity,
		imageKeys: deps.ImageKeys,
		now:       time.Now,
		done:      make(chan struct{}),
	}
	if cfg.ReapInterval > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.reapLoop(cfg.ReapInterval)
		}()
	}
	return s, nil
}

// Register registers the SessionService on r.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	sessionv1.RegisterSessionServiceServer(r, s)
}

// Close stops the reaper and ends open watches. It does not close the
// dependencies it was given.
func (s *Service) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { close(s.done) })
	waited := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(waited)
	}()
	select {
	case <-waited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("session: close: %w", ctx.Err())
	}
}
