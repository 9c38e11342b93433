// Package retention deletes history that has outlived its tenant's policy,
// by age and by count, and the blobs no entry refers to any more.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/deskgrid/deskgrid/services/history/internal/blob"
	"github.com/deskgrid/deskgrid/services/history/store"
)

// Policy is how much history a tenant keeps. Zero fields keep without limit.
type Policy struct {
	// MaxAge deletes entries older than this.
	MaxAge time.Duration
	// MaxEntries deletes a tenant's oldest entries beyond this many.
	MaxEntries int64
}

// Config configures a Sweeper.
type Config struct {
	// Default applies to every tenant without an override.
	Default Policy
	// Tenants overrides Default per tenant; a zero field of an override
	// takes Default's.
	Tenants map[string]Policy
	// BatchSize is the most entries one delete statement removes, so a
	// sweep never holds the database for long. Default 5000.
	BatchSize int
	// BlobGrace spares blobs written more recently than this, which an
	// entry being stored may be about to refer to. Default 1h.
	BlobGrace time.Duration
}

// Result is what a sweep removed.
type Result struct {
	Entries int64
	Blobs   int
}

// Sweeper applies the policies.
type Sweeper struct {
	cfg   Config
	store store.Store
	blobs blob.Store
	log   *slog.Logger
}

// New returns a Sweeper; blobs may be nil.
func New(cfg Config, st store.Store, blobs blob.Store, log *slog.Logger) *Sweeper {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 5000
	}
	if cfg.BlobGrace <= 0 {
		cfg.BlobGrace = time.Hour
	}
	if log == nil {
		log = slog.Default()
	}
	return &Sweeper{cfg: cfg, store: st, blobs: blobs, log: log}
}

// PolicyFor returns the policy that applies to tenant.
func (s *Sweeper) PolicyFor(tenant string) Policy {
	p := s.cfg.Default
	if o, ok := s.cfg.Tenants[tenant]; ok {
		if o.MaxAge != 0 {
			p.MaxAge = o.MaxAge
		}
		if o.MaxEntries != 0 {
			p.MaxEntries = o.MaxEntries
		}
	}
	return p
}

// Sweep applies every tenant's policy as of now, then deletes unreferenced
// blobs older than the grace period.
func (s *Sweeper) Sweep(ctx context.Context, now time.Time) (Result, error) {
	var res Result
	tenants, err := s.store.Tenants(ctx)
	if err != nil {
		return res, fmt.Errorf("retention: %w", err)
	}
	var errs []error
	for _, t := range tenants {
		p := s.PolicyFor(t.Tenant)
		if p.MaxAge > 0 {
			n, err := s.drain(ctx, func() (int64, error) {
				return s.store.DeleteBefore(ctx, t.Tenant, now.Add(-p.MaxAge), s.cfg.BatchSize)
			})
			res.Entries += n
			t.Entries -= n
			errs = append(errs, err)
		}
		if p.MaxEntries > 0 && t.Entries > p.MaxEntries {
			n, err := s.drain(ctx, func() (int64, error) {
				return s.store.DeleteOldest(ctx, t.Tenant, p.MaxEntries, s.cfg.BatchSize)
			})
			res.Entries += n
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
	if s.blobs != nil {
		err := s.blobs.Walk(ctx, now.Add(-s.cfg.BlobGrace), func(hash string) error {
			used, err := s.store.BlobReferenced(ctx, "", hash)
			if err != nil || used {
				return err
			}
			if err := s.blobs.Delete(ctx, hash); err != nil {
				return err
			}
			res.Blobs++
			return nil
		})
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("retention: %w", err)
	}
	return res, nil
}

// drain repeats a batch delete until a batch comes back short.
func (s *Sweeper) drain(ctx context.Context, del func() (int64, error)) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		n, err := del()
		total += n
		if err != nil || n < int64(s.cfg.BatchSize) {
			return total, err
		}
	}
	return total, ctx.Err()
}

// Run sweeps every interval until ctx ends.
func (s *Sweeper) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		res, err := s.Sweep(ctx, time.Now())
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("history retention sweep", "err", err, "entries_deleted", res.Entries, "blobs_deleted", res.Blobs)
		case res.Entries > 0 || res.Blobs > 0:
			s.log.Info("history retention sweep", "entries_deleted", res.Entries, "blobs_deleted", res.Blobs)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
