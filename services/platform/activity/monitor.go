package activity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// busyReports is how many of its reporter's intervals a busy report stands
// for: a reporter that dies stops holding its sessions after them.
const busyReports = 3

// forgetAfter drops what a monitor knows of a session nobody reported for
// this long (no idle timeout is longer than a session's longest TTL).
const forgetAfter = 25 * time.Hour

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// Interval is the one the trackers report at (DefaultInterval when
	// zero); a longer one heard in a report is taken instead.
	Interval time.Duration
}

// MonitorDeps are what a Monitor uses.
type MonitorDeps struct {
	// NATS carries the reports. Required.
	NATS   *nats.Conn
	Logger *slog.Logger
}

// Monitor keeps the latest reports of every Tracker.
type Monitor struct {
	sub   *nats.Subscription
	log   *slog.Logger
	now   func() time.Time
	since time.Time

	mu       sync.Mutex
	sessions map[string]seen
	longest  time.Duration // the longest reporter interval heard
	pruned   time.Time
}

type seen struct {
	last      time.Time // last use
	busyUntil time.Time // held busy until then, unless reported again
}

// NewMonitor subscribes to the reports; Close ends it.
func NewMonitor(cfg MonitorConfig, deps MonitorDeps) (*Monitor, error) {
	if deps.NATS == nil {
		return nil, errors.New("activity: a NATS connection is required")
	}
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	m := &Monitor{log: log, now: time.Now, sessions: map[string]seen{}, longest: cfg.Interval}
	m.since = m.now()
	sub, err := deps.NATS.Subscribe(Subject, m.receive)
	if err != nil {
		return nil, fmt.Errorf("activity: subscribe: %w", err)
	}
	// Reports arrive in bursts of one per reporter; a slow reaper must not
	// make NATS drop them.
	_ = sub.SetPendingLimits(-1, 64<<20)
	m.sub = sub
	return m, nil
}

func (m *Monitor) receive(msg *nats.Msg) {
	var r Report
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		m.log.Warn("activity: unreadable report", "err", err)
		return
	}
	now := m.now()
	interval := time.Duration(r.IntervalMillis) * time.Millisecond
	if interval <= 0 {
		interval = DefaultInterval
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.longest = max(m.longest, interval)
	for _, e := range r.Sessions {
		if e.SessionID == "" {
			continue
		}
		s := m.sessions[e.SessionID]
		if at := now.Add(-time.Duration(e.IdleMillis) * time.Millisecond); at.After(s.last) {
			s.last = at
		}
		if e.Busy {
			s.last = now
			s.busyUntil = now.Add(busyReports * interval)
		}
		m.sessions[e.SessionID] = s
	}
	if now.Sub(m.pruned) > time.Hour {
		m.pruned = now
		for id, s := range m.sessions {
			if now.Sub(s.last) > forgetAfter {
				delete(m.sessions, id)
			}
		}
	}
}

// State is what the reports say of a session.
type State struct {
	// LastActive is its last use reported; zero when none was.
	LastActive time.Time
	// Busy: something holds it in use (a stream, a viewer, a run).
	Busy bool
	// Warm: the monitor has listened long enough to have heard from every
	// reporter; before that, no report does not mean no use.
	Warm bool
}

// Session returns what the reports say of a session.
func (m *Monitor) Session(id string) State {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[id]
	return State{
		LastActive: s.last,
		Busy:       now.Before(s.busyUntil),
		Warm:       now.Sub(m.since) >= 2*m.longest,
	}
}

// Forget drops what the monitor knows of a session that ended.
func (m *Monitor) Forget(id string) {
	m.mu.Lock()
	delete(m.sessions, id)
	m.mu.Unlock()
}

// Close unsubscribes.
func (m *Monitor) Close(context.Context) error {
	if err := m.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("activity: unsubscribe: %w", err)
	}
	return nil
}
