// Package runlog numbers a run's events and serves them to any number of
// readers. Recent events stay in a bounded ring in memory; each reader is a
// cursor into it, so a slow reader costs the run nothing and holds no
// memory of its own. A reader that falls behind the ring, or reconnects
// later, reads the older events from the durable event log (JetStream).
package runlog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
)

// Replayer reads a run's events from the durable log.
type Replayer interface {
	// Replay calls fn for the run's events with after < sequence < before,
	// in order. before 0 means up to the end of the log.
	Replay(ctx context.Context, sessionID, runID string, after, before int64, fn func(*agentv1.RunEvent) error) error
}

// Sink receives every event, in order, to make it durable.
type Sink interface {
	Write(ctx context.Context, sessionID string, ev *agentv1.RunEvent) error
}

// ErrGone: the events asked for are older than the ring and there is no
// durable log to read them from.
var ErrGone = errors.New("run events no longer available")

// Log is one run's events.
type Log struct {
	runID, sessionID string
	replayer         Replayer

	mu      sync.Mutex
	ring    []*agentv1.RunEvent
	start   int // index in ring of the oldest event
	n       int // events in ring
	seq     int64
	done    bool
	changed chan struct{}

	out     chan *agentv1.RunEvent
	sinkErr error
	flushed chan struct{}
}

// New returns a log keeping the newest ringSize events, forwarding every
// event to sink (nil: none) from one goroutine so appends never wait on it
// unless sinkQueue events are already waiting.
func New(sessionID, runID string, startSeq int64, ringSize, sinkQueue int, sink Sink, replayer Replayer) *Log {
	if ringSize <= 0 {
		ringSize = 4096
	}
	l := &Log{runID: runID, sessionID: sessionID, replayer: replayer, ring: make([]*agentv1.RunEvent, ringSize), seq: startSeq, changed: make(chan struct{}), flushed: make(chan struct{})}
	if sink != nil {
		// Keeping the sink queue shorter than the ring means an event has
		// reached the durable log before it leaves the ring.
		if sinkQueue <= 0 || sinkQueue >= ringSize {
			sinkQueue = ringSize / 2
		}
		l.out = make(chan *agentv1.RunEvent, sinkQueue)
		go l.forward(sink)
	} else {
		close(l.flushed)
	}
	return l
}

func (l *Log) forward(sink Sink) {
	defer close(l.flushed)
	for ev := range l.out {
		// A durable log that refuses an event is reported once; the run
		// goes on and live readers still see it.
		if err := sink.Write(context.Background(), l.sessionID, ev); err != nil && l.sinkErr == nil {
			l.mu.Lock()
			l.sinkErr = err
			l.mu.Unlock()
		}
	}
}

// Append numbers ev, stores it and wakes readers. It returns ev.
func (l *Log) Append(ev *agentv1.RunEvent) *agentv1.RunEvent {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return ev
	}
	l.seq++
	ev.Sequence = l.seq
	ev.RunId = l.runID
	if ev.Time == nil {
		ev.Time = timestamppb.Now()
	}
	size := len(l.ring)
	if l.n < size {
		l.ring[(l.start+l.n)%size] = ev
		l.n++
	} else {
		l.ring[l.start] = ev
		l.start = (l.start + 1) % size
	}
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	if l.out != nil {
		l.out <- ev
	}
	return ev
}

// Sequence is the newest event's number.
func (l *Log) Sequence() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// Finish marks the log complete: readers end after the last event.
func (l *Log) Finish() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done = true
	close(l.changed)
	l.mu.Unlock()
	if l.out != nil {
		close(l.out)
	}
}

// Flush waits until the sink has every event of a finished log.
func (l *Log) Flush(ctx context.Context) error {
	select {
	case <-l.flushed:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.sinkErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reopen lets a finished log take events again (a run continued by a new
// message).
func (l *Log) Reopen(sink Sink) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		return
	}
	<-l.flushed
	l.done = false
	l.changed = make(chan struct{})
	l.flushed = make(chan struct{})
	if sink != nil {
		l.out = make(chan *agentv1.RunEvent, len(l.ring)/2)
		go l.forward(sink)
	} else {
		l.out = nil
		close(l.flushed)
	}
}

// batch returns up to max events after seq from the ring; behind is set
// when seq+1 is older than the ring's oldest event (which is oldest).
func (l *Log) batch(after int64, max int) (evs []*agentv1.RunEvent, oldest int64, done bool, wait <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	oldest = l.seq - int64(l.n) + 1
	if after+1 >= oldest {
		size := len(l.ring)
		for i := after + 1 - oldest; i < int64(l.n) && len(evs) < max; i++ {
			evs = append(evs, l.ring[(l.start+int(i))%size])
		}
	}
	return evs, oldest, l.done, l.changed
}

// Read sends fn every event after `after`, in order, following the run
// live until it finishes or ctx ends. It never blocks the run.
func (l *Log) Read(ctx context.Context, after int64, fn func(*agentv1.RunEvent) error) error {
	for {
		evs, oldest, done, wait := l.batch(after, 256)
		if len(evs) == 0 && after+1 < oldest {
			// Fallen behind the ring: the durable log has the gap.
			if l.replayer == nil {
				return fmt.Errorf("events %d..%d of run %s: %w", after+1, oldest-1, l.runID, ErrGone)
			}
			before := after
			err := l.replayer.Replay(ctx, l.sessionID, l.runID, after, oldest, func(ev *agentv1.RunEvent) error {
				if ev.GetSequence() != after+1 {
					return nil
				}
				after = ev.GetSequence()
				return fn(ev)
			})
			if err != nil {
				return err
			}
			if after == before {
				return fmt.Errorf("events %d..%d of run %s: %w", after+1, oldest-1, l.runID, ErrGone)
			}
			continue
		}
		for _, ev := range evs {
			if err := fn(ev); err != nil {
				return err
			}
			after = ev.GetSequence()
		}
		if len(evs) > 0 {
			continue
		}
		if done {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
