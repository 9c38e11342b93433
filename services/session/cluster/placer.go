package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/session/placement"
)

// PlacerConfig tunes a Placer.
type PlacerConfig struct {
	// K nodes are sampled and scored per placement (placement.DefaultK when zero).
	K int
	// TenantAntiAffinity prefers nodes with fewer of the tenant's sessions.
	TenantAntiAffinity bool
	// Rounds is how many fresh snapshots a placement tries before it gives
	// up (3 when zero): other replicas may fill the sampled nodes meanwhile.
	Rounds int
	// Seed seeds the sampling; zero seeds from the clock.
	Seed uint64
	// SnapshotMaxAge is how long a first attempt may use the snapshot an
	// earlier placement read (100 ms when zero; negative reads every time).
	// The reservation re-checks everything, so an old snapshot costs at
	// most a retry on a fresh one.
	SnapshotMaxAge time.Duration
}

// Placer places sessions on the registry's live nodes: best-of-K on a
// snapshot, then an atomic reservation on the best candidate, falling back
// to the next when another replica took the room first. It implements
// placement.Placer.
type Placer struct {
	reg *Registry
	cfg PlacerConfig

	mu     sync.Mutex
	rng    *rand.Rand
	snap   []placement.NodeState
	snapAt time.Time
	// snapImage is the image keys the cached snapshot's HasImage answers.
	snapImage string
}

var _ placement.Placer = (*Placer)(nil)

// NewPlacer returns a placer over reg.
func NewPlacer(reg *Registry, cfg PlacerConfig) *Placer {
	if cfg.K == 0 {
		cfg.K = placement.DefaultK
	}
	if cfg.SnapshotMaxAge == 0 {
		cfg.SnapshotMaxAge = 100 * time.Millisecond
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 3
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return &Placer{reg: reg, cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed>>1|1))}
}

// Place implements placement.Placer. Failures to reach Redis wrap
// placement.ErrUnavailable.
// Each call is counted once in deskgrid_placement_decisions_total, each
// attempt tried again in deskgrid_placement_retries_total.
func (p *Placer) Place(ctx context.Context, req placement.Request) (placement.Node, error) {
	n, err := p.place(ctx, req)
	if err != nil && ctx.Err() == nil && !errors.Is(err, placement.ErrNoCapacity) && !errors.Is(err, placement.ErrNoMatchingNode) {
		err = fmt.Errorf("%w: %w", placement.ErrUnavailable, err)
	}
	metrics.PlacementDecided(ctx, placement.Outcome(ctx, err))
	return n, err
}

func (p *Placer) place(ctx context.Context, req placement.Request) (placement.Node, error) {
	if a, err := p.reg.Lookup(ctx, req.SessionID); err == nil {
		// Already placed (a retried call): the same node again.
		return p.node(ctx, a.NodeID)
	} else if !errors.Is(err, ErrSessionNotPlaced) {
		return placement.Node{}, err
	}
	tenant := ""
	if p.cfg.TenantAntiAffinity {
		tenant = req.Tenant
	}
	var last error
	for round := 0; round < p.cfg.Rounds; round++ {
		snap, cached, err := p.snapshot(ctx, tenant, req.Image, round > 0)
		if err != nil {
			return placement.Node{}, err
		}
		p.mu.Lock()
		cands, err := placement.Choose(snap, req, placement.ChooseOptions{K: p.cfg.K, TenantAntiAffinity: p.cfg.TenantAntiAffinity}, p.rng)
		p.mu.Unlock()
		if err != nil {
			if cached {
				// The cached view may be out of date; look again.
				metrics.PlacementRetried(ctx, "stale_snapshot")
				continue
			}
			return placement.Node{}, err
		}
		for _, c := range cands {
			_, err := p.reg.Reserve(ctx, c.Node.ID, req)
			if err == nil {
				p.mu.Lock()
				// The next placement here sees this one even before the
				// snapshot is read again.
				c.Node.Used.Sessions++
				c.Node.Used.CPUMillis += req.Resources.CPUMillis
				c.Node.Used.MemoryBytes += req.Resources.MemoryBytes
				p.mu.Unlock()
				return placement.Node{ID: c.Node.ID, Address: c.Node.Address}, nil
			}
			var elsewhere *PlacedElsewhereError
			if errors.As(err, &elsewhere) {
				return p.node(ctx, elsewhere.Node)
			}
			var refused *RefusedError
			if !errors.Is(err, placement.ErrNoCapacity) && !errors.As(err, &refused) {
				return placement.Node{}, err
			}
			metrics.PlacementRetried(ctx, "reservation_refused")
			last = err
		}
	}
	return placement.Node{}, fmt.Errorf("every node tried was taken by concurrent placements (last: %v): %w", last, placement.ErrNoCapacity)
}

// snapshot returns the cached snapshot while it is young enough and was
// read for the same image, else reads one. Tenant counts are per request,
// so anti-affinity always reads.
func (p *Placer) snapshot(ctx context.Context, tenant string, image []string, fresh bool) (snap []placement.NodeState, cached bool, err error) {
	imageKey := strings.Join(image, "\n")
	if !fresh && tenant == "" && p.cfg.SnapshotMaxAge > 0 {
		p.mu.Lock()
		snap, at, key := p.snap, p.snapAt, p.snapImage
		p.mu.Unlock()
		if snap != nil && key == imageKey && time.Since(at) < p.cfg.SnapshotMaxAge {
			return snap, true, nil
		}
	}
	snap, err = p.reg.SnapshotFor(ctx, tenant, image)
	if err != nil {
		return nil, false, err
	}
	if tenant == "" {
		p.mu.Lock()
		p.snap, p.snapAt, p.snapImage = snap, time.Now(), imageKey
		p.mu.Unlock()
	}
	return snap, false, nil
}

func (p *Placer) node(ctx context.Context, id string) (placement.Node, error) {
	n, err := p.reg.Node(ctx, id)
	if err != nil {
		return placement.Node{}, err
	}
	return placement.Node{ID: n.ID, Address: n.Address}, nil
}

// Release implements placement.Placer.
func (p *Placer) Release(ctx context.Context, nodeID, sessionID string) error {
	return p.reg.Release(ctx, nodeID, sessionID)
}
