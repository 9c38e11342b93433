// Package activity tells the session service which sessions are in use, so
// that its idle reaper stops only sessions nobody uses.
//
// The services a session's use passes through note it in a Tracker: the
// node's display and sandbox (every action, screenshot, exec, shell command
// and file call, whoever made it: REST, gRPC, MCP, the console, an SDK or
// an agent run), and the agent service (a run in progress). A call is a
// use when it ends; what lasts (an exec stream, a VNC viewer, a run) holds
// the session busy for as long as it lasts.
//
// A Tracker publishes what it saw at most once an Interval: one message for
// all the sessions it saw, on core NATS (not the event stream: a report is
// worth nothing a minute later). Each session-service replica keeps the
// latest reports in a Monitor, which the reaper asks before it stops a
// session as idle. A use costs a map write under a lock; the bus carries
// one small message per reporter per interval however busy its sessions.
//
// Times travel as "idle for so long when this report was sent", so clocks
// of different machines need not agree.
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
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/deskgrid/deskgrid/services/platform/trail"
)

// Subject carries every Report. It lies outside the event stream's subjects.
const Subject = "deskgrid.activity"

// DefaultInterval is how often a Tracker reports.
const DefaultInterval = 5 * time.Second

// maxEntries bounds one message; a tracker with more sessions sends several.
const maxEntries = 2000

// Report is one reporter's news: the sessions used since its last report,
// and those held busy now.
type Report struct {
	// Reporter names the process (for logs).
	Reporter string `json:"reporter"`
	// IntervalMillis is the reporter's interval: a busy session it stops
	// reporting (it died) counts as busy for a few intervals only.
	IntervalMillis int64   `json:"interval_ms"`
	Sessions       []Entry `json:"sessions"`
}

// Entry is one session in a report.
type Entry struct {
	SessionID string `json:"id"`
	// IdleMillis is how long before the report the session was last used.
	IdleMillis int64 `json:"idle_ms"`
	// Busy: something holds the session in use now (a stream, a viewer, a
	// run in progress).
	Busy bool `json:"busy,omitempty"`
}

// TrackerConfig configures a Tracker.
type TrackerConfig struct {
	// Reporter names this process in its reports.
	Reporter string
	// Interval between reports; DefaultInterval when zero.
	Interval time.Duration
}

// TrackerDeps are what a Tracker uses.
type TrackerDeps struct {
	// NATS carries the reports. Required.
	NATS   *nats.Conn
	Logger *slog.Logger
}

// Tracker notes a process's uses of sessions and reports them.
type Tracker struct {
	reporter string
	interval time.Duration
	nc       *nats.Conn
	log      *slog.Logger

	mu    sync.Mutex
	last  map[string]time.Time // used since the last report
	holds map[string]int

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewTracker starts a tracker's reports; Close ends them.
func NewTracker(cfg TrackerConfig, deps TrackerDeps) (*Tracker, error) {
	if deps.NATS == nil {
		return nil, errors.New("activity: a NATS connection is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	t := &Tracker{
		reporter: cfg.Reporter, interval: cfg.Interval, nc: deps.NATS, log: log,
		last: map[string]time.Time{}, holds: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	go t.loop()
	return t, nil
}

// Touch notes a use of a session now.
func (t *Tracker) Touch(sessionID string) {
	if sessionID == "" {
		return
	}
	now := time.Now()
	t.mu.Lock()
	t.last[sessionID] = now
	t.mu.Unlock()
}

// Hold marks a session in use until the returned release is called (it may
// be called more than once). Releasing notes a use then.
func (t *Tracker) Hold(sessionID string) (release func()) {
	r := t.hold(sessionID)
	var once sync.Once
	return func() { once.Do(func() { r(nil) }) }
}

// Close sends a last report and stops.
func (t *Tracker) Close(ctx context.Context) error {
	t.once.Do(func() { close(t.stop) })
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("activity: close: %w", ctx.Err())
	}
}

func (t *Tracker) loop() {
	defer close(t.done)
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			t.Flush()
			return
		case <-tick.C:
			t.Flush()
		}
	}
}

// Flush publishes what was seen since the last report now, if anything.
// The loop calls it every interval.
func (t *Tracker) Flush() {
	now := time.Now()
	t.mu.Lock()
	if len(t.last) == 0 && len(t.holds) == 0 {
		t.mu.Unlock()
		return
	}
	entries := make([]Entry, 0, len(t.last)+len(t.holds))
	for id, at := range t.last {
		if t.holds[id] > 0 {
			continue
		}
		entries = append(entries, Entry{SessionID: id, IdleMillis: max(0, now.Sub(at).Milliseconds())})
	}
	for id := range t.holds {
		entries = append(entries, Entry{SessionID: id, Busy: true})
	}
	clear(t.last)
	t.mu.Unlock()
	for len(entries) > 0 {
		n := min(len(entries), maxEntries)
		data, err := json.Marshal(Report{Reporter: t.reporter, IntervalMillis: t.interval.Milliseconds(), Sessions: entries[:n]})
		entries = entries[n:]
		if err == nil {
			err = t.nc.Publish(Subject, data)
		}
		if err != nil {
			// The next report carries the busy sessions again; a touch lost
			// here is made up by the session's next use.
			t.log.Warn("activity: report not sent", "err", err)
			return
		}
	}
}

// ServerOptions are interceptors that note every call on a session's
// display and sandbox as a use of that session (the calls the trail
// records), and hold it busy while a call or stream lasts. A call refused
// (another tenant's session, no key) is no use of the session it named.
func (t *Tracker) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(t.unary),
		grpc.ChainStreamInterceptor(t.stream),
	}
}

func (t *Tracker) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !trail.Tracked(info.FullMethod) {
		return handler(ctx, req)
	}
	m, _ := req.(proto.Message)
	id := trail.SessionOf(m)
	release := t.hold(id)
	resp, err := handler(ctx, req)
	release(err)
	return resp, err
}

func (t *Tracker) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !trail.Tracked(info.FullMethod) {
		return handler(srv, ss)
	}
	w := &holdingStream{ServerStream: ss, t: t}
	err := handler(srv, w)
	if w.release != nil {
		w.release(err)
	}
	return err
}

// hold holds id busy until the returned func is called with the call's
// error; a refused call leaves no trace.
func (t *Tracker) hold(id string) func(error) {
	if id == "" {
		return func(error) {}
	}
	t.mu.Lock()
	t.holds[id]++
	t.mu.Unlock()
	return func(err error) {
		now := time.Now()
		t.mu.Lock()
		if t.holds[id]--; t.holds[id] <= 0 {
			delete(t.holds, id)
		}
		if !trail.Refused(err) {
			t.last[id] = now
		}
		t.mu.Unlock()
	}
}

// holdingStream holds the session its first message names.
type holdingStream struct {
	grpc.ServerStream
	t       *Tracker
	release func(error)
}

func (s *holdingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && s.release == nil {
		if pm, ok := m.(proto.Message); ok {
			if id := trail.SessionOf(pm); id != "" {
				s.release = s.t.hold(id)
			}
		}
	}
	return err
}
