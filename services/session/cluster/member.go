package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MemberConfig is how a node takes part in the cluster.
type MemberConfig struct {
	Node NodeInfo
	// Interval between heartbeats (1 s when zero); TTL after which a silent
	// node is gone (3 s when zero).
	Interval time.Duration
	TTL      time.Duration
	// RestartWait bounds how long a restarted node waits for the control
	// plane to give up the sessions of its previous run (3 × TTL when zero).
	RestartWait time.Duration
	// JoinTimeout bounds how long Join keeps trying while Redis does not
	// answer (one minute when zero): a node started during a short Redis
	// outage or stall joins once it is over, one pointed at a wrong
	// address fails.
	JoinTimeout time.Duration
	// Images, when set, lists the keys of the images the node holds
	// (placement.HeldImageKeys of each tag). They are recorded at join and
	// again after a heartbeat whenever they changed, so placement prefers
	// this node for sessions of those images within about one interval of a
	// pull.
	Images func(ctx context.Context) ([]string, error)
}

// Member keeps a node registered and alive. Whenever it (re)joins — at
// start, or after its heartbeat expired because it was stopped, partitioned
// or killed — it calls Reconcile with the sessions the map still gives it,
// before the node is announced alive again, so the node removes everything
// else.
type Member struct {
	reg       *Registry
	cfg       MemberConfig
	log       *slog.Logger
	reconcile func(ctx context.Context, keep map[string]bool) error
	bootID    string
	// epoch is the session map this node last reconciled against; unsure
	// is set while Redis holds no map (it lost its data) or one this node
	// has not reconciled against yet.
	epoch  string
	unsure bool
	// beats numbers heartbeats; last is the value of the last one that
	// succeeded; retry is set while a reconcile after a rejoin failed.
	beats uint64
	last  string
	retry bool
	// lastOK is when the last heartbeat succeeded, in Unix nanoseconds.
	lastOK atomic.Int64
	// images is the image keys last recorded, joined; imagesOK is set once
	// they were.
	images   string
	imagesOK bool

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Join registers the node, reconciles, sends the first heartbeat and keeps
// heartbeating until Close. reconcile receives the sessions to keep.
func Join(ctx context.Context, reg *Registry, cfg MemberConfig, logger *slog.Logger, reconcile func(ctx context.Context, keep map[string]bool) error) (*Member, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 3 * time.Second
	}
	if cfg.RestartWait <= 0 {
		cfg.RestartWait = 3 * cfg.TTL
	}
	if cfg.JoinTimeout <= 0 {
		cfg.JoinTimeout = time.Minute
	}
	if cfg.TTL <= cfg.Interval {
		return nil, fmt.Errorf("cluster: heartbeat TTL %s must be longer than the interval %s", cfg.TTL, cfg.Interval)
	}
	if logger == nil {
		logger = slog.Default()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	m := &Member{reg: reg, cfg: cfg, log: logger.With("node", cfg.Node.ID), reconcile: reconcile,
		bootID: hex.EncodeToString(b[:]), stop: make(chan struct{}), done: make(chan struct{})}
	if err := m.join(ctx); err != nil {
		return nil, err
	}
	go m.loop()
	return m, nil
}

// join registers the node, waits out its previous life and rejoins,
// starting again after a failure until JoinTimeout has passed.
func (m *Member) join(ctx context.Context) error {
	deadline := time.Now().Add(m.cfg.JoinTimeout)
	wait := m.cfg.Interval
	for {
		err := m.reg.Register(ctx, m.cfg.Node)
		// A node restarted before its heartbeat expired still looks alive,
		// and the map still gives it the sessions of its previous life,
		// whose X servers died with that process. End the old heartbeat so
		// the control plane marks them LOST and releases them, then start
		// afresh.
		if err == nil {
			err = m.waitForPreviousLife(ctx)
		}
		if err == nil {
			err = m.rejoin(ctx)
		}
		if err == nil || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		m.log.Warn("cannot join the cluster yet; trying again", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (m *Member) waitForPreviousLife(ctx context.Context) error {
	held, err := m.reg.Assigned(ctx, m.cfg.Node.ID)
	if err != nil || len(held) == 0 {
		return err
	}
	m.log.Warn("the session map still gives this node sessions of its previous run; waiting for the control plane to mark them lost", "sessions", len(held))
	if err := m.reg.Leave(ctx, m.cfg.Node.ID); err != nil {
		return err
	}
	deadline := time.Now().Add(m.cfg.RestartWait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(m.cfg.Interval / 4):
		}
		held, err := m.reg.Assigned(ctx, m.cfg.Node.ID)
		if err != nil {
			return err
		}
		if len(held) == 0 {
			return nil
		}
	}
	m.log.Warn("no session service released the sessions of the previous run in time; keeping their records as they are", "waited", m.cfg.RestartWait)
	return nil
}

func (m *Member) rejoin(ctx context.Context) error {
	epoch, err := m.reg.Epoch(ctx)
	if err != nil {
		return err
	}
	keep, err := m.reg.Assigned(ctx, m.cfg.Node.ID)
	if err != nil {
		return err
	}
	// Without a map (no session replica has built one yet), what the node
	// keeps is decided again once one is built.
	m.epoch, m.unsure = epoch, epoch == ""
	if m.reconcile != nil {
		if err := m.reconcile(ctx, keep); err != nil {
			return fmt.Errorf("reconcile node %s: %w", m.cfg.Node.ID, err)
		}
	}
	// Redis may have lost the node's images with the rest.
	m.imagesOK = false
	m.publishImages(ctx)
	_, err = m.beat(ctx)
	return err
}

// publishImages records the node's image keys when they changed since they
// were last recorded. A failure is logged and tried again on the next
// heartbeat: placement then only misses a preference.
func (m *Member) publishImages(ctx context.Context) {
	if m.cfg.Images == nil {
		return
	}
	keys, err := m.cfg.Images(ctx)
	if err != nil {
		m.log.Warn("list the node's images for placement", "err", err)
		return
	}
	slices.Sort(keys)
	joined := strings.Join(keys, "\n")
	if m.imagesOK && joined == m.images {
		return
	}
	if err := m.reg.SetImages(ctx, m.cfg.Node.ID, keys); err != nil {
		m.log.Warn("record the node's images for placement", "err", err)
		return
	}
	m.images, m.imagesOK = joined, true
}

// beat sends one heartbeat.
func (m *Member) beat(ctx context.Context) (rejoined bool, err error) {
	m.beats++
	value := m.bootID + "." + strconv.FormatUint(m.beats, 10)
	rejoined, err = m.reg.HeartbeatAfter(ctx, m.cfg.Node.ID, value, m.last, m.cfg.TTL)
	if err == nil {
		m.last = value
		m.lastOK.Store(time.Now().UnixNano())
	}
	return rejoined, err
}

// LastHeartbeat is when the node's last heartbeat succeeded: the control
// plane declares the node gone once it is TTL old.
func (m *Member) LastHeartbeat() time.Time {
	return time.Unix(0, m.lastOK.Load())
}

func (m *Member) loop() {
	defer close(m.done)
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Interval)
		rejoined, err := m.beat(ctx)
		if err == nil && (rejoined || m.retry) {
			// Until a reconcile succeeds, every heartbeat tries again:
			// the key renewed, the next heartbeat no longer says so.
			if err = m.rejoined(ctx); err != nil {
				m.log.Warn("reconciling after the heartbeat had expired failed; trying again", "err", err)
			}
			m.retry = err != nil
		} else if err == nil && m.unsure {
			err = m.settle(ctx)
		}
		if err == nil {
			m.publishImages(ctx)
		}
		cancel()
		switch {
		case err != nil && !failing:
			m.log.Warn("cluster heartbeat failing", "err", err)
			failing = true
		case err == nil && failing:
			m.log.Info("cluster heartbeat recovered")
			failing = false
		}
	}
}

// rejoined handles a heartbeat that had expired. If the session map is the
// one this node knew, the control plane declared the node gone meanwhile:
// its sessions were marked lost and released, so it takes down what is no
// longer its own. If Redis lost its data instead (restarted empty,
// flushed), the missing map says nothing about this node's sessions: it
// keeps every desktop until a session replica has rebuilt the map from the
// session records, and reconciles against that (settle). Registration and
// the node's images are recorded again either way, in case they were lost
// too.
func (m *Member) rejoined(ctx context.Context) error {
	if err := m.reg.Register(ctx, m.cfg.Node); err != nil {
		return err
	}
	// Redis may have lost the node's images with the rest: they are
	// recorded again after this heartbeat.
	m.imagesOK = false
	epoch, err := m.reg.Epoch(ctx)
	if err != nil {
		return err
	}
	if epoch != "" && epoch == m.epoch {
		m.log.Warn("heartbeat had expired; reconciling with the session map")
		return m.rejoin(ctx)
	}
	if !m.unsure {
		m.log.Warn("Redis lost the cluster state (restarted empty?); keeping every desktop until the session map is rebuilt from the session records")
	}
	m.unsure = true
	return m.settle(ctx)
}

// settle reconciles against a session map built since Redis lost its data.
func (m *Member) settle(ctx context.Context) error {
	epoch, err := m.reg.Epoch(ctx)
	if err != nil || epoch == "" {
		return err
	}
	keep, err := m.reg.Assigned(ctx, m.cfg.Node.ID)
	if err != nil {
		return err
	}
	if m.reconcile != nil {
		if err := m.reconcile(ctx, keep); err != nil {
			return fmt.Errorf("reconcile node %s: %w", m.cfg.Node.ID, err)
		}
	}
	m.log.Info("session map rebuilt; reconciled with it", "sessions", len(keep))
	m.epoch, m.unsure = epoch, false
	return nil
}

// Close stops heartbeating and, when leave is set, ends the heartbeat at
// once so the control plane declares the node's sessions lost without
// waiting for the TTL.
func (m *Member) Close(ctx context.Context, leave bool) error {
	m.once.Do(func() { close(m.stop) })
	select {
	case <-m.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if leave {
		return m.reg.Leave(ctx, m.cfg.Node.ID)
	}
	return nil
}

// Watcher finds nodes whose heartbeat expired while they still hold
// sessions, and hands each to Lost (such as session.Service's
// MarkNodeSessionsLost, which releases the sessions, so a node is reported
// until its sessions are all released). Every replica may run one: Lost
// must be idempotent.
type Watcher struct {
	reg      *Registry
	interval time.Duration
	lost     func(ctx context.Context, nodeID string) error
	log      *slog.Logger
	ended    func(ctx context.Context, sessionID string) (bool, error)
	sweep    time.Duration
	records  func(ctx context.Context) ([]Assignment, error)
	grace    time.Duration

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Watch checks every interval (500 ms when zero) until Close.
func Watch(reg *Registry, interval time.Duration, logger *slog.Logger, lost func(ctx context.Context, nodeID string) error) *Watcher {
	return WatchWith(reg, WatchConfig{Interval: interval, Logger: logger, Lost: lost})
}

// WatchConfig configures a Watcher.
type WatchConfig struct {
	// Interval between heartbeat checks (500 ms when zero).
	Interval time.Duration
	Logger   *slog.Logger
	// Lost is told about each node whose heartbeat expired with sessions.
	Lost func(ctx context.Context, nodeID string) error
	// Ended, when set, is asked every SweepEvery (1 min when zero) about
	// each session in the map; those that ended are released. It frees
	// reservations whose release failed (Redis unreachable at that moment).
	Ended      func(ctx context.Context, sessionID string) (bool, error)
	SweepEvery time.Duration
	// Records, when set, lists the sessions the session records place on
	// a node and that have not ended. Whenever Redis holds no session map
	// (at first, or after it lost its data) the watcher rebuilds it from
	// them before it judges any heartbeat.
	Records func(ctx context.Context) ([]Assignment, error)
	// Grace is how long heartbeats are not judged after Redis was
	// unreachable (or lost its data): every live node must have heartbeated
	// again meanwhile, which may take it its heartbeat TTL. 3 × Interval
	// when zero.
	Grace time.Duration
}

// WatchWith starts a watcher.
func WatchWith(reg *Registry, cfg WatchConfig) *Watcher {
	if cfg.Interval <= 0 {
		cfg.Interval = 500 * time.Millisecond
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 3 * cfg.Interval
	}
	w := &Watcher{reg: reg, interval: cfg.Interval, lost: cfg.Lost, log: cfg.Logger, ended: cfg.Ended, sweep: cfg.SweepEvery, records: cfg.Records,
		grace: cfg.Grace, stop: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *Watcher) loop() {
	defer close(w.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-w.stop
		cancel()
	}()
	t := time.NewTicker(w.interval)
	defer t.Stop()
	// After Redis was unreachable (or restarted), heartbeat keys may have
	// expired while nodes could not renew them: only trust an expiry once
	// Redis has answered for long enough that live nodes have heartbeated.
	grace := w.grace
	reachableSince := time.Now()
	lastSweep := time.Now()
	failing := false
	epoch := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := w.reg.Ping(ctx); err != nil {
			if ctx.Err() == nil && !failing {
				w.log.Warn("check node heartbeats: Redis unreachable", "err", err)
			}
			failing = true
			continue
		}
		if failing {
			failing = false
			reachableSince = time.Now()
			w.log.Info("Redis reachable again; trusting heartbeats after a grace period", "grace", grace)
		}
		cur, err := w.rebuild(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("rebuild the session map from the session records", "err", err)
			}
			continue
		}
		if cur != epoch {
			// A new session map, rebuilt by this replica or another one:
			// the nodes' heartbeats were lost with the old one, so give
			// them time to heartbeat again before judging any.
			epoch = cur
			reachableSince = time.Now()
		}
		if time.Since(reachableSince) < grace {
			continue
		}
		if err := w.check(ctx, epoch); err != nil && ctx.Err() == nil {
			w.log.Warn("check node heartbeats", "err", err)
		}
		if w.ended != nil && time.Since(lastSweep) >= w.sweep {
			lastSweep = time.Now()
			if n, err := w.reg.SweepEnded(ctx, w.ended); err != nil && ctx.Err() == nil {
				w.log.Warn("sweep the session map", "err", err)
			} else if n > 0 {
				w.log.Info("released reservations of ended sessions", "count", n)
			}
		}
	}
}

// rebuild restores the session map from the records if Redis has none
// (when the watcher has Records), and returns the epoch of the map Redis
// holds then.
func (w *Watcher) rebuild(ctx context.Context) (string, error) {
	epoch, err := w.reg.Epoch(ctx)
	if err != nil || epoch != "" || w.records == nil {
		return epoch, err
	}
	recs, err := w.records(ctx)
	if err != nil {
		return "", err
	}
	n, err := w.reg.Restore(ctx, recs)
	if err != nil {
		return "", err
	}
	if n > 0 {
		w.log.Warn("Redis held no session map (restarted empty?); rebuilt it from the session records", "sessions", n)
	}
	return w.reg.Epoch(ctx)
}

// Check runs one pass.
func (w *Watcher) Check(ctx context.Context) error {
	epoch, err := w.reg.Epoch(ctx)
	if err != nil {
		return err
	}
	return w.check(ctx, epoch)
}

// check runs one pass on the session map of epoch: a map rebuilt since
// (Redis lost its data meanwhile) is left for the next pass, after the
// grace its nodes are given to heartbeat into it.
func (w *Watcher) check(ctx context.Context, epoch string) error {
	dead, err := w.reg.DeadWithSessions(ctx, epoch)
	if err != nil {
		return err
	}
	for _, id := range dead {
		if w.lost == nil {
			continue
		}
		if err := w.lost(ctx, id); err != nil {
			w.log.Warn("mark sessions of a dead node lost", "node", id, "err", err)
			continue
		}
		// Whatever the records did not account for (a placement whose
		// create died before writing the node) is released too, so the
		// node stops being reported.
		if err := w.reg.ReleaseNode(ctx, id); err != nil {
			w.log.Warn("release sessions of a dead node", "node", id, "err", err)
		}
	}
	return nil
}

// Close stops the watcher.
func (w *Watcher) Close(ctx context.Context) error {
	w.once.Do(func() { close(w.stop) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
