// Package history is deskgrid's history service: the durable log of every
// event a session produced, fed from the JetStream event stream and served
// as pages of a session's entries.
package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	"github.com/deskgrid/deskgrid/services/history/ingest"
	"github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/events"
)

// Config configures the service. Zero values take the defaults.
type Config struct {
	// Durable is the JetStream consumer name; replicas sharing it share
	// the work. Default "history".
	Durable string
	// BatchSize is the most events stored per transaction. Default 256.
	BatchSize int
	// BatchWait is how long a batch waits to fill once it has an event.
	// Default 50ms.
	BatchWait time.Duration
	// MaxAckPending bounds events delivered and not yet stored. Default 4096.
	MaxAckPending int
	// AckWait is how long before JetStream redelivers an event delivered to
	// a history service that vanished. Default 30s.
	AckWait time.Duration
	// RetryDelay is the pause before a batch the store refused is retried.
	// Default 1s.
	RetryDelay time.Duration
	// StreamReplicas and StreamMaxAge configure the event stream, which the
	// service creates if it is missing. Defaults 1 and 0 (no age limit).
	StreamReplicas int
	StreamMaxAge   time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	ic := ingest.DefaultConfig()
	return Config{
		Durable:        ic.Durable,
		BatchSize:      ic.BatchSize,
		BatchWait:      ic.BatchWait,
		MaxAckPending:  ic.MaxAckPending,
		AckWait:        ic.AckWait,
		RetryDelay:     ic.RetryDelay,
		StreamReplicas: 1,
	}
}

// Deps are what the service uses. The caller owns Store and the NATS
// connection behind JS, and closes them after the service.
type Deps struct {
	Logger *slog.Logger
	Store  store.Store
	JS     jetstream.JetStream
}

// Service ingests events and serves historyv1.HistoryService.
type Service struct {
	historyv1.UnimplementedHistoryServiceServer

	log    *slog.Logger
	store  store.Store
	ingest *ingest.Ingester
}

// New makes sure the event stream exists and starts ingesting from it. ctx
// bounds the setup only; the service runs until Close.
func New(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	if deps.Store == nil || deps.JS == nil {
		return nil, errors.New("history: Store and JS are required")
	}
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	if _, err := events.EnsureStream(ctx, deps.JS, events.StreamConfig(cfg.StreamReplicas, cfg.StreamMaxAge)); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	// The ingester lives until Close, not until ctx ends; its JetStream
	// setup calls are bounded by the client's default API timeout.
	in, err := ingest.Start(context.WithoutCancel(ctx), ingest.Config{
		Durable:       cfg.Durable,
		BatchSize:     cfg.BatchSize,
		BatchWait:     cfg.BatchWait,
		MaxAckPending: cfg.MaxAckPending,
		AckWait:       cfg.AckWait,
		RetryDelay:    cfg.RetryDelay,
	}, deps.JS, deps.Store, log)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	log.Info("history ingesting", "durable", cfg.Durable, "stream", events.StreamName)
	return &Service{log: log, store: deps.Store, ingest: in}, nil
}

// Register registers the gRPC service.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	historyv1.RegisterHistoryServiceServer(r, s)
}

// IngestStats reports what ingestion has done so far.
func (s *Service) IngestStats() ingest.Stats { return s.ingest.Stats() }

// Close stops ingestion, storing what was already delivered unless ctx ends
// first. It does not close the store.
func (s *Service) Close(ctx context.Context) error {
	return s.ingest.Close(ctx)
}
