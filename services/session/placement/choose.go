package placement

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
	// HasImage: it holds the image of the session being placed (one of
	// Request.Image), so it starts the session without a pull.
	HasImage bool
}

// ImageMissPenalty is added to the score of a node that would have to pull
// the session's image first: a pull takes seconds to minutes and the whole
// image's disk, so such a node is chosen over one holding the image only
// when it is at least this much less loaded (half its capacity).
const ImageMissPenalty = 0.5

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

// noMatch is an ErrNoMatchingNode that says why in its own words.
type noMatch struct{ msg string }

func (e noMatch) Error() string { return e.msg }
func (e noMatch) Unwrap() error { return ErrNoMatchingNode }

// Choose samples up to K feasible nodes of snapshot with rng and returns them
// best first: the caller reserves on the first and falls back to the next if
// the reservation is refused (another replica filled it meanwhile). The same
// snapshot, request and rng state give the same answer.
//
// It returns ErrNoMatchingNode when no live, non-draining node carries the
// selector's labels, and ErrNoCapacity when such nodes exist but are full.
func Choose(snapshot []NodeState, req Request, opts ChooseOptions, rng *rand.Rand) ([]Candidate, error) {
	feasible := make([]int, 0, len(snapshot))
	up, matching := 0, 0
	for i := range snapshot {
		n := &snapshot[i]
		if !n.Alive || n.Draining {
			continue
		}
		up++
		if !Matches(n.Labels, req.NodeSelector) {
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
	switch {
	case up == 0 && len(snapshot) == 0:
		return nil, noMatch{"no node is up and not draining (0 registered)"}
	case up == 0:
		return nil, noMatch{fmt.Sprintf("no node is up and not draining (%d registered: down or draining)", len(snapshot))}
	case matching == 0 && up == 1:
		return nil, fmt.Errorf("%w %v among the 1 node up and not draining", ErrNoMatchingNode, req.NodeSelector)
	case matching == 0:
		return nil, fmt.Errorf("%w %v among the %d nodes up and not draining", ErrNoMatchingNode, req.NodeSelector, up)
	}
	if len(feasible) == 0 {
		return nil, fmt.Errorf("%d matching nodes are full: %w", matching, ErrNoCapacity)
	}
	// Snapshot order must not matter: sort so the same rng picks the same nodes.
	slices.SortFunc(feasible, func(a, b int) int { return cmp.Compare(snapshot[a].ID, snapshot[b].ID) })
	var picked []int
	if len(req.Image) > 0 {
		// Up to K nodes holding the image and up to K others are scored, so
		// a holder is always among the candidates when there is one, and an
		// idle node still wins over a crowded holder.
		var holders, others []int
		for _, i := range feasible {
			if snapshot[i].HasImage {
				holders = append(holders, i)
			} else {
				others = append(others, i)
			}
		}
		picked = append(sample(holders, opts.K, rng), sample(others, opts.K, rng)...)
	} else {
		picked = sample(feasible, opts.K, rng)
	}
	out := make([]Candidate, len(picked))
	for i, idx := range picked {
		n := &snapshot[idx]
		out[i] = Candidate{Node: n, Score: Score(n, req.Resources, opts)}
		if len(req.Image) > 0 && !n.HasImage {
			out[i].Score += ImageMissPenalty
		}
	}
	slices.SortStableFunc(out, func(a, b Candidate) int {
		if c := cmp.Compare(a.Score, b.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.Node.ID, b.Node.ID)
	})
	return out, nil
}

// sample reorders xs so that its first k entries are a uniform sample of it
// (a partial Fisher-Yates), and returns them; k <= 0 takes every entry.
func sample(xs []int, k int, rng *rand.Rand) []int {
	if k <= 0 || k > len(xs) {
		k = len(xs)
	}
	for i := 0; i < k; i++ {
		j := i + rng.IntN(len(xs)-i)
		xs[i], xs[j] = xs[j], xs[i]
	}
	return xs[:k]
}

// ImageKeys name an image as nodes report what they hold (ImageKeys for
// each tag) and as a placement request asks for it: tenant's tag name and
// a public tag of that name, or the manifest digest under the tenant and
// public. name is the normalised reference ("docker.io/library/debian:12")
// or a digest ("sha256:...").
func ImageKeys(tenant, name string) []string {
	if strings.HasPrefix(name, "sha256:") {
		return []string{"d\t" + tenant + "\t" + name, "dp\t" + name}
	}
	return []string{"t\t" + tenant + "\t" + name, "tp\t" + name}
}

// HeldImageKeys are the keys a node reports for one tag it holds: by name
// and by digest, for its tenant, and for everyone when it is public.
func HeldImageKeys(tenant, name, digest string, public bool) []string {
	out := []string{"t\t" + tenant + "\t" + name, "d\t" + tenant + "\t" + digest}
	if public {
		out = append(out, "tp\t"+name, "dp\t"+digest)
	}
	return out
}
