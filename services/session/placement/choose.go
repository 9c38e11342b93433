package placement

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
)

// Capacity is an amount of each resource placement accounts for. Zero CPU or
// memory capacity means the node does not limit that resource.
type Capacity struct {
	Sessions    int64
	CPUMillis   int64
	MemoryBytes int64
}

// NodeState is one node as a snapshot of the registry shows it.
type NodeState struct {
	ID      string
	Address string
	Labels  map[string]string
	// Capacity the node offers and what reservations Used of it.
	Capacity Capacity
	Used     Capacity
	// Alive: its heartbeat has not expired. Draining: it takes no new sessions.
	Alive    bool
	Draining bool
	// TenantSessions is how many sessions of the requesting tenant it holds;
	// only read with ChooseOptions.TenantAntiAffinity.
	TenantSessions int64
}

// ChooseOptions tune Choose.
type ChooseOptions struct {
	// K is how many feasible nodes are sampled and scored (best of K);
	// zero or less scores every feasible node.
	K int
	// TenantAntiAffinity prefers nodes holding fewer of the tenant's
	// sessions, so one node's failure takes fewer of a tenant's desktops.
	TenantAntiAffinity bool
}

// DefaultK samples three nodes: close to the balance of scoring every node,
// while replicas placing at once rarely pick the same one.
const DefaultK = 3

// Fits reports whether n can take a session asking for r with selector.
func Fits(n *NodeState, selector map[string]string, r Resources) bool {
	if !n.Alive || n.Draining || !Matches(n.Labels, selector) {
		return false
	}
	if n.Used.Sessions+1 > n.Capacity.Sessions {
		return false
	}
	if n.Capacity.CPUMillis > 0 && n.Used.CPUMillis+r.CPUMillis > n.Capacity.CPUMillis {
		return false
	}
	if n.Capacity.MemoryBytes > 0 && n.Used.MemoryBytes+r.MemoryBytes > n.Capacity.MemoryBytes {
		return false
	}
	return true
}

// Score is the load n would carry with one more session asking for r: the
// fullest of its resources, as a fraction, plus the tenant's share when
// anti-affinity is on. Lower is better.
func Score(n *NodeState, r Resources, opts ChooseOptions) float64 {
	load := ratio(n.Used.Sessions+1, n.Capacity.Sessions)
	if n.Capacity.CPUMillis > 0 {
		load = max(load, ratio(n.Used.CPUMillis+r.CPUMillis, n.Capacity.CPUMillis))
	}
	if n.Capacity.MemoryBytes > 0 {
		load = max(load, ratio(n.Used.MemoryBytes+r.MemoryBytes, n.Capacity.MemoryBytes))
	}
	if opts.TenantAntiAffinity {
		load += ratio(n.TenantSessions, max(n.Capacity.Sessions, 1))
	}
	return load
}

func ratio(a, b int64) float64 {
	if b <= 0 {
		return 1
	}
	return float64(a) / float64(b)
}

// Candidate is a node Choose picked, with its score.
type Candidate struct {
	Node  *NodeState
	Score float64
}

// Choose samples up to K feasible nodes of snapshot with rng and returns them
// best first: the caller reserves on the first and falls back to the next if
// the reservation is refused (another replica filled it meanwhile). The same
// snapshot, request and rng state give the same answer.
//
// It returns ErrNoMatchingNode when no live, non-draining node carries the
// selector's labels, and ErrNoCapacity when such nodes exist but are full.
func Choose(snapshot []NodeState, req Request, opts ChooseOptions, rng *rand.Rand) ([]Candidate, error) {
	feasible := make([]int, 0, len(snapshot))
	matching := 0
	for i := range snapshot {
		n := &snapshot[i]
		if !n.Alive || n.Draining || !Matches(n.Labels, req.NodeSelector) {
			continue
		}
		matching++
		if slices.Contains(req.Exclude, n.ID) {
			continue
		}
		if Fits(n, req.NodeSelector, req.Resources) {
			feasible = append(feasible, i)
		}
	}
	if matching == 0 {
		return nil, fmt.Errorf("%w %v among %d nodes (live and not draining)", ErrNoMatchingNode, req.NodeSelector, len(snapshot))
	}
	if len(feasible) == 0 {
		return nil, fmt.Errorf("%d matching nodes are full: %w", matching, ErrNoCapacity)
	}
	// Snapshot order must not matter: sort so the same rng picks the same nodes.
	slices.SortFunc(feasible, func(a, b int) int { return cmp.Compare(snapshot[a].ID, snapshot[b].ID) })
	k := opts.K
	if k <= 0 || k > len(feasible) {
		k = len(feasible)
	}
	// Partial Fisher-Yates: the first k entries become a uniform sample.
	for i := 0; i < k; i++ {
		j := i + rng.IntN(len(feasible)-i)
		feasible[i], feasible[j] = feasible[j], feasible[i]
	}
	out := make([]Candidate, k)
	for i, idx := range feasible[:k] {
		n := &snapshot[idx]
		out[i] = Candidate{Node: n, Score: Score(n, req.Resources, opts)}
	}
	slices.SortStableFunc(out, func(a, b Candidate) int {
		if c := cmp.Compare(a.Score, b.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.Node.ID, b.Node.ID)
	})
	return out, nil
}
