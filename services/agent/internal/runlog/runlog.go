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

// Item is an event on its way to the durable log, with the bytes it refers
// to (a screenshot's image), which stay out of memory once it is stored.
type Item struct {
	Event *agentv1.RunEvent
	Data  []byte
}

// Sink receives every event, in order and in batches, to make it durable.
// WriteBatch returns once every event of the batch is stored.
type Sink interface {
	WriteBatch(ctx context.Context, items []Item) error
}

// Flusher is a Sink that holds published events whose storage is not yet
// confirmed; Flush confirms them.
type Flusher interface {
	Flush(ctx context.Context) error
}

// maxBatch bounds the events handed to the sink at once; with the sink
// queue it bounds the events not yet durable (the queue and two batches),
// which must stay below the ring so nothing leaves memory before it is in
// the durable log.
const maxBatch = 256

// ErrGone: the events asked for are older than the ring and there is no
// durable log to read them from.
var ErrGone = errors.New("run events no longer available")

// Log is one run's events.
type Log struct {
	runID, sessionID string
	replayer         Replayer

	// sendMu orders appends, so the sink gets events in sequence order,
	// and keeps Finish from closing the queue under a pending send.
	sendMu  sync.Mutex
	mu      sync.Mutex
	ring    []*agentv1.RunEvent
	start   int // index in ring of the oldest event
	n       int // events in ring
	seq     int64
	done    bool
	changed chan struct{}

	out      chan Item
	queue    int // capacity of out
	batchMax int
	sinkErr  error
	flushed  chan struct{}
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
		l.batchMax = min(maxBatch, max(ringSize/4, 1))
		if sinkQueue <= 0 || sinkQueue+l.batchMax >= ringSize {
			sinkQueue = max(ringSize/2-l.batchMax, 1)
		}
		l.queue = sinkQueue
		l.out = make(chan Item, sinkQueue)
		go l.forward(sink, l.out)
	} else {
		close(l.flushed)
	}
	return l
}

func (l *Log) forward(sink Sink, out <-chan Item) {
	defer close(l.flushed)
	batch := make([]Item, 0, l.batchMax)
	for ev := range out {
		// Whatever queued up while the last batch was stored goes in the next.
		batch = append(batch[:0], ev)
	drain:
		for len(batch) < l.batchMax {
			select {
			case ev, ok := <-out:
				if !ok {
					break drain
				}
				batch = append(batch, ev)
			default:
				break drain
			}
		}
		// A durable log that refuses events is reported once; the run goes
		// on and live readers still see them.
		l.sinkFailed(sink.WriteBatch(context.Background(), batch))
		if f, ok := sink.(Flusher); ok && len(out) == 0 {
			// Nothing waiting: confirm now rather than with the next batch.
			l.sinkFailed(f.Flush(context.Background()))
		}
	}
	if f, ok := sink.(Flusher); ok {
		l.sinkFailed(f.Flush(context.Background()))
	}
}

func (l *Log) sinkFailed(err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	if l.sinkErr == nil {
		l.sinkErr = err
	}
	l.mu.Unlock()
}

// Append numbers ev, stores it and wakes readers. It returns ev.
func (l *Log) Append(ev *agentv1.RunEvent) *agentv1.RunEvent { return l.AppendData(ev, nil) }

// AppendData is Append for an event whose bytes (data) go to the durable
// log with it but are not kept in memory.
func (l *Log) AppendData(ev *agentv1.RunEvent, data []byte) *agentv1.RunEvent {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
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
	out := l.out
	l.mu.Unlock()
	if out != nil {
		// Blocks only when the durable log has fallen a whole queue behind:
		// the run waits rather than lose events.
		out <- Item{Event: ev, Data: data}
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
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done = true
	close(l.changed)
	out := l.out
	l.mu.Unlock()
	if out != nil {
		close(out)
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
	if !l.done {
		l.mu.Unlock()
		return
	}
	flushed := l.flushed
	l.mu.Unlock()
	<-flushed
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = false
	l.changed = make(chan struct{})
	l.flushed = make(chan struct{})
	if sink != nil {
		if l.queue == 0 {
			l.batchMax = min(maxBatch, max(len(l.ring)/4, 1))
			l.queue = max(len(l.ring)/2-l.batchMax, 1)
		}
		l.out = make(chan Item, l.queue)
		go l.forward(sink, l.out)
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
