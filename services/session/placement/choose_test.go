package placement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

func node(id string, used, capSessions int64) NodeState {
	return NodeState{ID: id, Address: id + ":1", Alive: true,
		Capacity: Capacity{Sessions: capSessions, CPUMillis: 8000, MemoryBytes: 16 << 30},
		Used:     Capacity{Sessions: used}}
}

func ids(cs []Candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Node.ID
	}
	return out
}

func TestChoose(t *testing.T) {
	gpu := node("gpu", 0, 10)
	gpu.Labels = map[string]string{"gpu": "true", "region": "eu"}
	dead := node("dead", 0, 10)
	dead.Alive = false
	draining := node("draining", 0, 10)
	draining.Draining = true
	cpuFull := node("cpufull", 0, 10)
	cpuFull.Used.CPUMillis = 7500
	memFull := node("memfull", 0, 10)
	memFull.Used.MemoryBytes = 16 << 30
	tenantHeavy := node("heavy", 2, 10)
	tenantHeavy.TenantSessions = 2
	tenantLight := node("light", 3, 10)
	holds := func(n NodeState) NodeState { n.HasImage = true; return n }
	img := []string{"t\tacme\tdocker.io/team/desk:v1"}

	tests := []struct {
		name    string
		nodes   []NodeState
		req     Request
		opts    ChooseOptions
		want    []string
		wantErr error
	}{
		{name: "no nodes", wantErr: ErrNoMatchingNode},
		{name: "least loaded first", nodes: []NodeState{node("a", 5, 10), node("b", 1, 10), node("c", 3, 10)},
			want: []string{"b", "c", "a"}},
		{name: "load is relative to capacity", nodes: []NodeState{node("small", 1, 2), node("big", 5, 20)},
			want: []string{"big", "small"}},
		{name: "full nodes are left out", nodes: []NodeState{node("full", 10, 10), node("b", 9, 10)},
			want: []string{"b"}},
		{name: "all full", nodes: []NodeState{node("a", 10, 10), node("b", 4, 4)}, wantErr: ErrNoCapacity},
		{name: "dead and draining nodes are skipped", nodes: []NodeState{dead, draining, node("ok", 9, 10)},
			want: []string{"ok"}},
		{name: "only dead or draining", nodes: []NodeState{dead, draining}, wantErr: ErrNoMatchingNode},
		{name: "selector", nodes: []NodeState{node("plain", 0, 10), gpu},
			req: Request{NodeSelector: map[string]string{"gpu": "true"}}, want: []string{"gpu"}},
		{name: "selector matches nothing", nodes: []NodeState{node("plain", 0, 10), gpu},
			req: Request{NodeSelector: map[string]string{"gpu": "true", "region": "us"}}, wantErr: ErrNoMatchingNode},
		{name: "cpu ask does not fit", nodes: []NodeState{cpuFull, node("ok", 8, 10)},
			req: Request{Resources: Resources{CPUMillis: 1000}}, want: []string{"ok"}},
		{name: "memory ask does not fit", nodes: []NodeState{memFull},
			req: Request{Resources: Resources{MemoryBytes: 1}}, wantErr: ErrNoCapacity},
		{name: "cpu dominates the score", nodes: []NodeState{cpuFull, node("ok", 5, 10)},
			req: Request{Resources: Resources{CPUMillis: 100}}, want: []string{"ok", "cpufull"}},
		{name: "without anti-affinity load decides", nodes: []NodeState{tenantHeavy, tenantLight},
			want: []string{"heavy", "light"}},
		{name: "anti-affinity prefers fewer of the tenant", nodes: []NodeState{tenantHeavy, tenantLight},
			opts: ChooseOptions{TenantAntiAffinity: true}, want: []string{"light", "heavy"}},
		{name: "ties break by id", nodes: []NodeState{node("b", 1, 10), node("a", 1, 10)},
			want: []string{"a", "b"}},
		{name: "a node holding the image is preferred", nodes: []NodeState{holds(node("has", 3, 10)), node("idle", 1, 10)},
			req: Request{Image: img}, want: []string{"has", "idle"}},
		{name: "an idle node wins over a crowded holder", nodes: []NodeState{holds(node("has", 9, 10)), node("idle", 0, 10)},
			req: Request{Image: img}, want: []string{"idle", "has"}},
		{name: "holding counts only for a session with an image", nodes: []NodeState{holds(node("has", 3, 10)), node("idle", 1, 10)},
			want: []string{"idle", "has"}},
		{name: "a full holder is left out", nodes: []NodeState{holds(node("has", 10, 10)), node("idle", 8, 10)},
			req: Request{Image: img}, want: []string{"idle"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Choose(tt.nodes, tt.req, tt.opts, rand.New(rand.NewPCG(1, 2)))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(got), tt.want) {
				t.Fatalf("got %v, want %v", ids(got), tt.want)
			}
		})
	}
}

// When no node matches, the error says why in terms an operator acts on:
// no node up at all (every one down or draining), or none of the nodes up
// carries the labels; never an empty selector nor a count of nodes that
// are down.
func TestChooseNoMatchSaysWhy(t *testing.T) {
	dead := node("dead", 0, 10)
	dead.Alive = false
	draining := node("draining", 0, 10)
	draining.Draining = true
	plain := node("plain", 0, 10)
	tests := []struct {
		name  string
		nodes []NodeState
		sel   map[string]string
		want  string
	}{
		{name: "none registered", want: "no node is up and not draining (0 registered)"},
		{name: "all down or draining", nodes: []NodeState{dead, draining},
			want: "no node is up and not draining (2 registered: down or draining)"},
		{name: "all down, with a selector", nodes: []NodeState{dead}, sel: map[string]string{"gpu": "true"},
			want: "no node is up and not draining (1 registered: down or draining)"},
		{name: "labels missing", nodes: []NodeState{dead, plain}, sel: map[string]string{"gpu": "true"},
			want: "no node matches the node selector map[gpu:true] among the 1 node up and not draining"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Choose(tt.nodes, Request{NodeSelector: tt.sel}, ChooseOptions{}, rand.New(rand.NewPCG(1, 2)))
			if !errors.Is(err, ErrNoMatchingNode) || err.Error() != tt.want {
				t.Fatalf("Choose: %v, want %q", err, tt.want)
			}
		})
	}
}

func TestChooseBestOfKIsDeterministic(t *testing.T) {
	var nodes []NodeState
	for i := range 50 {
		nodes = append(nodes, node(fmt.Sprintf("n%02d", i), int64(i%7), 10))
	}
	shuffled := slices.Clone(nodes)
	rand.New(rand.NewPCG(9, 9)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for seed := range uint64(20) {
		a, err := Choose(nodes, Request{}, ChooseOptions{K: 3}, rand.New(rand.NewPCG(seed, 0)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Choose(shuffled, Request{}, ChooseOptions{K: 3}, rand.New(rand.NewPCG(seed, 0)))
		if len(a) != 3 || !slices.Equal(ids(a), ids(b)) {
			t.Fatalf("seed %d: %v vs %v (snapshot order must not matter)", seed, ids(a), ids(b))
		}
		if !sort.SliceIsSorted(a, func(i, j int) bool { return a[i].Score < a[j].Score }) {
			t.Fatalf("seed %d: not best first: %+v", seed, a)
		}
	}
}

// A node holding the image is among the candidates however few are
// sampled, next to K others.
func TestChooseSamplesHoldersAndOthers(t *testing.T) {
	var nodes []NodeState
	for i := range 30 {
		nodes = append(nodes, node(fmt.Sprintf("n%02d", i), 2, 10))
	}
	nodes[17].HasImage = true
	nodes[17].Used.Sessions = 4
	for seed := range uint64(20) {
		cs, err := Choose(nodes, Request{Image: []string{"k"}}, ChooseOptions{K: 1}, rand.New(rand.NewPCG(seed, 0)))
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 2 || cs[0].Node.ID != "n17" || cs[1].Node.HasImage {
			t.Fatalf("seed %d: %v", seed, ids(cs))
		}
	}
}

func TestImageKeysMatchHeld(t *testing.T) {
	held := HeldImageKeys("acme", "docker.io/team/desk:v1", "sha256:aa", false)
	pub := HeldImageKeys("other", "docker.io/library/debian:12", "sha256:bb", true)
	has := func(keys, want []string) bool {
		for _, k := range want {
			if slices.Contains(keys, k) {
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		held []string
		ask  []string
		want bool
	}{
		{held, ImageKeys("acme", "docker.io/team/desk:v1"), true},
		{held, ImageKeys("acme", "sha256:aa"), true},
		{held, ImageKeys("evil", "docker.io/team/desk:v1"), false}, // another tenant's tag
		{held, ImageKeys("evil", "sha256:aa"), false},
		{pub, ImageKeys("anyone", "docker.io/library/debian:12"), true},
		{pub, ImageKeys("anyone", "sha256:bb"), true},
		{pub, ImageKeys("anyone", "docker.io/library/debian:13"), false},
	} {
		if got := has(c.held, c.ask); got != c.want {
			t.Errorf("held %q asked %q: %v, want %v", c.held, c.ask, got, c.want)
		}
	}
}

// Placing one by one with best-of-K on what the snapshot says spreads
// sessions: no node ends up far above the others.
func TestChooseSpreads(t *testing.T) {
	nodes := []NodeState{node("a", 0, 100), node("b", 0, 100), node("c", 0, 100), node("d", 0, 100)}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		cs, err := Choose(nodes, Request{}, ChooseOptions{K: 2}, rng)
		if err != nil {
			t.Fatal(err)
		}
		for i := range nodes {
			if nodes[i].ID == cs[0].Node.ID {
				nodes[i].Used.Sessions++
			}
		}
	}
	for _, n := range nodes {
		if n.Used.Sessions < 45 || n.Used.Sessions > 55 {
			t.Fatalf("uneven spread: %+v", nodes)
		}
	}
}

// BenchmarkChoose100 is the pure choice over 100 nodes; p99-ns is the 99th
// percentile of single choices.
func BenchmarkChoose100(b *testing.B) {
	var nodes []NodeState
	for i := range 100 {
		n := node(fmt.Sprintf("n%03d", i), int64(i%20), 32)
		n.Labels = map[string]string{"region": []string{"eu", "us"}[i%2]}
		nodes = append(nodes, n)
	}
	req := Request{NodeSelector: map[string]string{"region": "eu"}, Resources: Resources{CPUMillis: 500, MemoryBytes: 1 << 30}}
	rng := rand.New(rand.NewPCG(1, 1))
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := Choose(nodes, req, ChooseOptions{K: DefaultK}, rng); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
