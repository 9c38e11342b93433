// Package history is deskgrid's history service: the durable log of every
// event a session produced, fed from the JetStream event stream, with
// screenshots kept once in a blob store; served as pages of a session's or
// run's entries, run transcripts, full-text search and JSON Lines export and
// import, and trimmed by per-tenant retention.
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
	"github.com/deskgrid/deskgrid/services/history/internal/blob"
	"github.com/deskgrid/deskgrid/services/history/internal/ingest"
	"github.com/deskgrid/deskgrid/services/history/internal/retention"
	"github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/auth"
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

	// BlobDir is the directory screenshots are kept in when Deps.Blobs is
	// nil. Empty, with no Deps.Blobs, keeps them inline in their entries.
	BlobDir string
	// RetentionMaxAge deletes entries older than this; 0 keeps them.
	RetentionMaxAge time.Duration
	// RetentionMaxEntriesPerTenant deletes a tenant's oldest entries beyond
	// this many; 0 keeps them all.
	RetentionMaxEntriesPerTenant int64
	// RetentionTenants overrides the two limits above per tenant; a zero
	// field of an override takes the default.
	RetentionTenants map[string]RetentionPolicy
	// SweepInterval is how often retention runs and unreferenced blobs are
	// collected. Default 5m; negative never.
	SweepInterval time.Duration
	// BlobGrace spares blobs younger than this from collection. Default 1h.
	BlobGrace time.Duration
	// MaxImportBytes bounds one ImportSessionHistory stream. Default 256 MiB.
	MaxImportBytes int64
}

// RetentionPolicy is how much history a tenant keeps.
type RetentionPolicy = retention.Policy

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
		SweepInterval:  5 * time.Minute,
		BlobGrace:      time.Hour,
		MaxImportBytes: 256 << 20,
	}
}

// Deps are what the service uses. The caller owns Store and the NATS
// connection behind JS, and closes them after the service.
type Deps struct {
	Logger *slog.Logger
	Store  store.Store
	JS     jetstream.JetStream
	// Blobs keeps screenshots, such as in an object store; nil uses
	// Config.BlobDir.
	Blobs blob.Store
	// Tenancy says who a call acts for (auth.CallerOf with auth on, nil
	// with auth off). A call for a tenant reads, searches, exports and
	// deletes only entries recorded for that tenant, and imports only into
	// it; another tenant's session, run or blob is answered as one never
	// recorded. An anonymous call is refused (Unauthenticated).
	Tenancy auth.Tenancy
}

// Service ingests events and serves historyv1.HistoryService.
type Service struct {
	historyv1.UnimplementedHistoryServiceServer

	cfg     Config
	log     *slog.Logger
	store   store.Store
	blobs   blob.Store
	tenancy auth.Tenancy
	ingest  *ingest.Ingester
	sweep   *retention.Sweeper
	// stopSweep ends the sweeper; sweepDone closes when it has.
	stopSweep context.CancelFunc
	sweepDone chan struct{}
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
	d := DefaultConfig()
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = d.SweepInterval
	}
	if cfg.BlobGrace <= 0 {
		cfg.BlobGrace = d.BlobGrace
	}
	if cfg.MaxImportBytes <= 0 {
		cfg.MaxImportBytes = d.MaxImportBytes
	}
	blobs := deps.Blobs
	if blobs == nil && cfg.BlobDir != "" {
		dir, err := blob.OpenDir(cfg.BlobDir)
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		blobs = dir
	}
	if blobs == nil {
		log.Warn("history has no blob store: screenshots stay inline in their entries")
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
	}, deps.JS, deps.Store, blobs, log)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	log.Info("history ingesting", "durable", cfg.Durable, "stream", events.StreamName)
	s := &Service{cfg: cfg, log: log, store: deps.Store, blobs: blobs, tenancy: deps.Tenancy, ingest: in, sweepDone: make(chan struct{})}
	s.sweep = retention.New(retention.Config{
		Default:   retention.Policy{MaxAge: cfg.RetentionMaxAge, MaxEntries: cfg.RetentionMaxEntriesPerTenant},
		Tenants:   cfg.RetentionTenants,
		BlobGrace: cfg.BlobGrace,
	}, deps.Store, blobs, log.With("component", "history.retention"))
	sweepCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopSweep = stop
	if cfg.SweepInterval > 0 {
		go func() {
			defer close(s.sweepDone)
			s.sweep.Run(sweepCtx, cfg.SweepInterval)
		}()
	} else {
		close(s.sweepDone)
	}
	return s, nil
}

// Register registers the gRPC service.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	historyv1.RegisterHistoryServiceServer(r, s)
}

// IngestStats reports what ingestion has done so far.
func (s *Service) IngestStats() ingest.Stats { return s.ingest.Stats() }

// Sweep applies retention and collects unreferenced blobs now, as the
// background sweeper does every SweepInterval.
func (s *Service) Sweep(ctx context.Context) (retention.Result, error) {
	return s.sweep.Sweep(ctx, time.Now())
}

// Close stops ingestion, storing what was already delivered unless ctx ends
// first, and the sweeper. It does not close the store.
func (s *Service) Close(ctx context.Context) error {
	s.stopSweep()
	err := s.ingest.Close(ctx)
	select {
	case <-s.sweepDone:
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("history: close: %w", ctx.Err()))
	}
	return err
}
