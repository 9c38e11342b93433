package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deskgrid/deskgrid/services/session/placement"
)

// Registry reads and writes the cluster state in Redis. It is safe for
// concurrent use. Every call to Redis has a deadline (CallTimeout unless
// the caller's is sooner), so a frozen or unreachable Redis fails calls
// fast instead of holding creates past their clients' timeouts. The client
// must be made with ContextTimeoutEnabled, or go-redis ignores deadlines.
type Registry struct {
	rdb     redis.UniversalClient
	k       keys
	timeout time.Duration
	// labelCache maps a node's raw label JSON to its decoded labels.
	labelCache sync.Map
}

// NewRegistry uses rdb with keys under prefix (DefaultPrefix when empty).
func NewRegistry(rdb redis.UniversalClient, prefix string) *Registry {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Registry{rdb: rdb, k: keys(prefix), timeout: CallTimeout}
}

// CallTimeout bounds one call to Redis. Every call the registry makes is a
// few commands or one short script: well under a millisecond when Redis is
// well.
const CallTimeout = 2 * time.Second

func (r *Registry) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.timeout)
}

// Prefix is the prefix of every key the registry uses.
func (r *Registry) Prefix() string { return string(r.k) }

// NodeInfo is what a node registers.
type NodeInfo struct {
	ID string
	// Address the node's display and sandbox gRPC services are reached at.
	Address  string
	Capacity placement.Capacity
	Labels   map[string]string
}

// Register records (or updates) a node's address, capacity and labels. It
// does not make the node alive: the first Heartbeat does.
func (r *Registry) Register(ctx context.Context, n NodeInfo) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	if n.ID == "" || n.Address == "" || n.Capacity.Sessions <= 0 {
		return fmt.Errorf("register node: id, address and a session capacity above zero are required")
	}
	if strings.ContainsAny(n.ID, "\t") || strings.ContainsAny(n.Address, "\t") {
		return fmt.Errorf("register node: id and address may not contain tabs")
	}
	labels, err := json.Marshal(n.Labels)
	if err != nil {
		return err
	}
	info := fmt.Sprintf("%s\t%d\t%d\t%d\t%s", n.Address, n.Capacity.Sessions, n.Capacity.CPUMillis, n.Capacity.MemoryBytes, labels)
	if err := r.rdb.HSet(ctx, r.k.nodes(), n.ID, info).Err(); err != nil {
		return fmt.Errorf("register node %s: %w", n.ID, err)
	}
	return nil
}

// Heartbeat renews node id's liveness for ttl. rejoined is true when the
// heartbeat had expired (or this is the first): the control plane may have
// declared the node's sessions lost, so the node must reconcile.
func (r *Registry) Heartbeat(ctx context.Context, id, bootID string, ttl time.Duration) (rejoined bool, err error) {
	return r.HeartbeatAfter(ctx, id, bootID, bootID, ttl)
}

// HeartbeatAfter is Heartbeat with a value of its own for each heartbeat:
// rejoined is also true when the key holds another value than prev, the
// node's last heartbeat that succeeded (one whose answer was lost may have
// renewed an expired key late).
func (r *Registry) HeartbeatAfter(ctx context.Context, id, value, prev string, ttl time.Duration) (rejoined bool, err error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	n, err := heartbeatScript.Run(ctx, r.rdb, []string{r.k.alive(id)}, ttl.Milliseconds(), value, prev).Int()
	if err != nil {
		return false, fmt.Errorf("heartbeat of node %s: %w", id, err)
	}
	return n == 1, nil
}

// SetImages replaces the keys of the images node id holds
// (placement.HeldImageKeys of each tag), which placement prefers.
func (r *Registry) SetImages(ctx context.Context, id string, keys []string) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.k.images(id))
		if len(keys) > 0 {
			members := make([]any, len(keys))
			for i, k := range keys {
				members[i] = k
			}
			p.SAdd(ctx, r.k.images(id), members...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record the images of node %s: %w", id, err)
	}
	return nil
}

// Leave ends node id's heartbeat at once, as when it shuts down: its
// sessions are declared lost without waiting for the TTL.
func (r *Registry) Leave(ctx context.Context, id string) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	return r.rdb.Del(ctx, r.k.alive(id)).Err()
}

// SetDraining marks node id as draining (no new sessions) or not.
func (r *Registry) SetDraining(ctx context.Context, id string, draining bool) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	ok, err := r.rdb.HExists(ctx, r.k.nodes(), id).Result()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("node %q: %w", id, ErrNodeNotFound)
	}
	if draining {
		return r.rdb.SAdd(ctx, r.k.draining(), id).Err()
	}
	return r.rdb.SRem(ctx, r.k.draining(), id).Err()
}

// Snapshot returns every registered node, with its liveness, drain flag and
// usage, sorted by id; TenantSessions counts tenant's sessions (when tenant
// is not empty). One round trip, a fixed number of commands.
func (r *Registry) Snapshot(ctx context.Context, tenant string) ([]placement.NodeState, error) {
	return r.SnapshotFor(ctx, tenant, nil)
}

// SnapshotFor is Snapshot with HasImage set on the nodes that hold any of
// the image keys (placement.ImageKeys) a placement asks for.
func (r *Registry) SnapshotFor(ctx context.Context, tenant string, image []string) ([]placement.NodeState, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	args := make([]any, 0, 2+len(image))
	args = append(args, string(r.k), tenant)
	for _, k := range image {
		args = append(args, k)
	}
	res, err := snapshotScript.Run(ctx, r.rdb, nil, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("read nodes: %w", err)
	}
	if len(res) != 6 {
		return nil, fmt.Errorf("read nodes: unexpected reply of %d parts", len(res))
	}
	nodes, alive, draining, used, tenants, holds := strs(res[0]), strs(res[1]), strs(res[2]), strs(res[3]), strs(res[4]), strs(res[5])
	usage := make(map[string]int64, len(used)/2)
	for i := 0; i+1 < len(used); i += 2 {
		usage[used[i]] = atoi(used[i+1])
	}
	out := make([]placement.NodeState, 0, len(nodes)/2)
	for i := 0; i+1 < len(nodes); i += 2 {
		id := nodes[i]
		f := strings.SplitN(nodes[i+1], "\t", 5)
		if len(f) != 5 {
			continue
		}
		n := placement.NodeState{
			ID:       id,
			Address:  f[0],
			Capacity: placement.Capacity{Sessions: atoi(f[1]), CPUMillis: atoi(f[2]), MemoryBytes: atoi(f[3])},
			Labels:   r.labels(f[4]),
			Alive:    i/2 < len(alive) && alive[i/2] == "1",
			Draining: slices.Contains(draining, id),
			Used:     placement.Capacity{Sessions: usage[id+"\ts"], CPUMillis: usage[id+"\tc"], MemoryBytes: usage[id+"\tm"]},
		}
		if i/2 < len(tenants) {
			n.TenantSessions = atoi(tenants[i/2])
		}
		n.HasImage = i/2 < len(holds) && holds[i/2] == "1"
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b placement.NodeState) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// labels decodes a node's labels, remembering the result: they change only
// when a node registers again, and snapshots are read on every placement.
// Callers must not modify the map returned.
func (r *Registry) labels(raw string) map[string]string {
	if v, ok := r.labelCache.Load(raw); ok {
		return v.(map[string]string)
	}
	var m map[string]string
	if raw != "" && raw != "null" {
		_ = json.Unmarshal([]byte(raw), &m)
	}
	r.labelCache.Store(raw, m)
	return m
}

func strs(v any) []string {
	xs, _ := v.([]any)
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i], _ = x.(string)
	}
	return out
}

// Node returns one node's state.
func (r *Registry) Node(ctx context.Context, id string) (placement.NodeState, error) {
	all, err := r.Snapshot(ctx, "")
	if err != nil {
		return placement.NodeState{}, err
	}
	for _, n := range all {
		if n.ID == id {
			return n, nil
		}
	}
	return placement.NodeState{}, fmt.Errorf("node %q: %w", id, ErrNodeNotFound)
}

// Forget removes a node that is gone for good from the registry. Its
// sessions must have been released first.
func (r *Registry) Forget(ctx context.Context, id string) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, r.k.nodes(), id)
		p.HDel(ctx, r.k.used(), id+"\ts", id+"\tc", id+"\tm")
		p.SRem(ctx, r.k.draining(), id)
		p.Del(ctx, r.k.alive(id), r.k.tenants(id), r.k.sessions(id))
		return nil
	})
	return err
}

// Reserve atomically places sessionID on node id if the node is alive, not
// draining and has room for the ask, and returns the generation of the
// placement. A session already on id returns its generation again.
func (r *Registry) Reserve(ctx context.Context, id string, req placement.Request) (int64, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	res, err := reserveScript.Run(ctx, r.rdb, nil, string(r.k), id, req.SessionID,
		req.Resources.CPUMillis, req.Resources.MemoryBytes, req.Tenant).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("reserve on node %s: %w", id, err)
	}
	switch res[0] {
	case "ok":
		return atoi(res[1]), nil
	case "elsewhere":
		return 0, &PlacedElsewhereError{Node: res[1]}
	case "full":
		return 0, fmt.Errorf("node %s has no room for the %s asked: %w", id, res[1], placement.ErrNoCapacity)
	default:
		return 0, &RefusedError{Node: id, Reason: res[0]}
	}
}

// Release gives back what sessionID reserved on node id (on whichever node
// it is when id is empty). Releasing what is not held succeeds.
func (r *Registry) Release(ctx context.Context, id, sessionID string) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	if err := releaseScript.Run(ctx, r.rdb, nil, string(r.k), id, sessionID).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("release session %s: %w", sessionID, err)
	}
	return nil
}

// ReleaseNode releases every session the map gives node id.
func (r *Registry) ReleaseNode(ctx context.Context, id string) error {
	held, err := r.Assigned(ctx, id)
	if err != nil {
		return err
	}
	for sid := range held {
		if err := r.Release(ctx, id, sid); err != nil {
			return err
		}
	}
	return nil
}

// Lookup returns the session-map entry of sessionID.
func (r *Registry) Lookup(ctx context.Context, sessionID string) (Assignment, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	v, err := r.rdb.HGet(ctx, r.k.smap(), sessionID).Result()
	if errors.Is(err, redis.Nil) {
		return Assignment{}, fmt.Errorf("session %s: %w", sessionID, ErrSessionNotPlaced)
	}
	if err != nil {
		return Assignment{}, fmt.Errorf("look up session %s: %w", sessionID, err)
	}
	a, ok := parseAssignment(sessionID, v)
	if !ok {
		return Assignment{}, fmt.Errorf("session %s: malformed map entry %q", sessionID, v)
	}
	return a, nil
}

// Resolve returns the gRPC address of the node sessionID runs on, in one
// round trip; ErrSessionNotPlaced when the map has no entry. While Redis
// holds no session map, or the map names a node that has not registered
// since it was rebuilt (Redis lost its data moments ago), the error wraps
// ErrMapRebuilding: the session may well run, ask again shortly.
func (r *Registry) Resolve(ctx context.Context, sessionID string) (string, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	res, err := resolveScript.Run(ctx, r.rdb, nil, string(r.k), sessionID).StringSlice()
	if errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("session %s: %w", sessionID, ErrSessionNotPlaced)
	}
	if err != nil {
		return "", fmt.Errorf("look up session %s: %w", sessionID, err)
	}
	switch {
	case len(res) == 4 && res[3] == "no-map":
		return "", fmt.Errorf("session %s: Redis holds no session map (restarted empty?) until a session replica rebuilds it from the records: %w", sessionID, ErrMapRebuilding)
	case len(res) == 4 && res[3] == "unregistered":
		return "", fmt.Errorf("session %s: its node %s has not registered again since the session map was rebuilt: %w", sessionID, res[1], ErrMapRebuilding)
	case len(res) == 0 || res[0] == "":
		return "", fmt.Errorf("session %s: its node %v is no longer registered: %w", sessionID, res, ErrNodeNotFound)
	}
	return res[0], nil
}

// Assigned returns the sessions the map gives node id: what the node keeps
// when it reconciles.
func (r *Registry) Assigned(ctx context.Context, id string) (map[string]bool, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	ids, err := r.rdb.SMembers(ctx, r.k.sessions(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("sessions of node %s: %w", id, err)
	}
	out := make(map[string]bool, len(ids))
	for _, s := range ids {
		out[s] = true
	}
	return out, nil
}

// DeadWithSessions returns the nodes whose heartbeat expired while the map
// still gives them sessions. It returns none unless the map is still the
// one of epoch (read in the same transaction as the heartbeats): in a map
// rebuilt meanwhile, every heartbeat is missing until the nodes renew it.
func (r *Registry) DeadWithSessions(ctx context.Context, epoch string) ([]string, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	ids, err := r.rdb.HKeys(ctx, r.k.nodes()).Result()
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	alive := make([]*redis.IntCmd, len(ids))
	held := make([]*redis.IntCmd, len(ids))
	var cur *redis.StringCmd
	_, err = r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		cur = p.Get(ctx, r.k.epoch())
		for i, id := range ids {
			alive[i] = p.Exists(ctx, r.k.alive(id))
			held[i] = p.SCard(ctx, r.k.sessions(id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read node heartbeats: %w", err)
	}
	if cur.Val() != epoch {
		return nil, nil
	}
	var dead []string
	for i, id := range ids {
		if alive[i].Val() == 0 && held[i].Val() > 0 {
			dead = append(dead, id)
		}
	}
	slices.Sort(dead)
	return dead, nil
}

// PlacedElsewhereError: the session already holds a placement on another node.
type PlacedElsewhereError struct{ Node string }

func (e *PlacedElsewhereError) Error() string {
	return "session is already placed on node " + e.Node
}

// RefusedError: the node cannot take sessions now (dead, draining, unknown).
type RefusedError struct{ Node, Reason string }

func (e *RefusedError) Error() string { return "node " + e.Node + " refused the session: " + e.Reason }

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// Ping checks that Redis answers.
func (r *Registry) Ping(ctx context.Context) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	return r.rdb.Ping(ctx).Err()
}

// SweepEnded releases every session in the map that ended says has ended,
// and returns how many it released.
func (r *Registry) SweepEnded(ctx context.Context, ended func(ctx context.Context, sessionID string) (bool, error)) (int, error) {
	n := 0
	iter := r.rdb.HScan(ctx, r.k.smap(), 0, "", 500).Iterator()
	for iter.Next(ctx) {
		sid := iter.Val()
		if !iter.Next(ctx) {
			break
		}
		a, ok := parseAssignment(sid, iter.Val())
		if !ok {
			continue
		}
		done, err := ended(ctx, sid)
		if err != nil {
			return n, err
		}
		if !done {
			continue
		}
		if err := r.Release(ctx, a.NodeID, sid); err != nil {
			return n, err
		}
		n++
	}
	return n, iter.Err()
}

// Epoch returns the id of the session map Redis holds, "" when it has none:
// Redis lost its data (restarted empty, flushed) and the map has not been
// rebuilt from the session records yet.
func (r *Registry) Epoch(ctx context.Context) (string, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	v, err := r.rdb.Get(ctx, r.k.epoch()).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the session map's epoch: %w", err)
	}
	return v, nil
}

// Restore rebuilds the session map from the session records: each
// assignment is put back on its node unless the map already has the
// session. Then it marks the map built (a new epoch, unless another
// replica set one first) and returns how many it restored.
func (r *Registry) Restore(ctx context.Context, records []Assignment) (int, error) {
	n := 0
	for _, a := range records {
		if a.NodeID == "" || strings.ContainsAny(a.NodeID, "\t") {
			continue
		}
		cctx, cancel := r.bound(ctx)
		done, err := restoreScript.Run(cctx, r.rdb, nil, string(r.k), a.NodeID, a.SessionID, a.CPUMillis, a.Memory, a.Tenant).Int()
		cancel()
		if err != nil {
			return n, fmt.Errorf("restore session %s on node %s: %w", a.SessionID, a.NodeID, err)
		}
		n += done
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	cctx, cancel := r.bound(ctx)
	defer cancel()
	if err := r.rdb.SetNX(cctx, r.k.epoch(), hex.EncodeToString(b[:]), 0).Err(); err != nil {
		return n, fmt.Errorf("mark the session map built: %w", err)
	}
	return n, nil
}
