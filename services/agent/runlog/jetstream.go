package runlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
)

// Event types of run events in the deskgrid event stream; the payload is
// always an agentv1.RunEvent, whose run_id names the run.
const (
	TypeMessage    = "agent.message.v1"
	TypeToolCall   = "agent.tool_call.v1"
	TypeScreenshot = "agent.screenshot.v1"
	TypeUsage      = "agent.usage.v1"
	TypeRunState   = "agent.run_state.v1"
)

// TypeOf is the event type a run event is published as.
func TypeOf(ev *agentv1.RunEvent) string {
	switch ev.GetEvent().(type) {
	case *agentv1.RunEvent_ToolCall:
		return TypeToolCall
	case *agentv1.RunEvent_Screenshot:
		return TypeScreenshot
	case *agentv1.RunEvent_Usage:
		return TypeUsage
	case *agentv1.RunEvent_State:
		return TypeRunState
	default:
		return TypeMessage
	}
}

// PublisherSink makes run events durable through the platform publisher.
type PublisherSink struct {
	Publisher events.Publisher
	Tenant    string
}

// Write implements Sink, retrying a failed publish a few times.
func (p PublisherSink) Write(ctx context.Context, sessionID string, ev *agentv1.RunEvent) error {
	var err error
	for i := range 5 {
		_, err = p.Publisher.Publish(ctx, events.Meta{Type: TypeOf(ev), SessionID: sessionID, Tenant: p.Tenant, Sequence: ev.GetSequence()}, ev)
		if err == nil {
			return nil
		}
		time.Sleep(time.Duration(50<<i) * time.Millisecond)
	}
	return err
}

// JetStreamReplayer reads run events back from the event stream.
type JetStreamReplayer struct {
	JS jetstream.JetStream
}

// Replay implements Replayer.
func (r JetStreamReplayer) Replay(ctx context.Context, sessionID, runID string, after, before int64, fn func(*agentv1.RunEvent) error) error {
	cons, err := r.JS.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SessionSubject(sessionID)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("replay run %s: %w", runID, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("replay run %s: %w", runID, err)
	}
	if info.NumPending == 0 {
		return nil
	}
	for {
		batch, err := cons.Fetch(512, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("replay run %s: %w", runID, err)
		}
		n := 0
		var last uint64 = 1
		for m := range batch.Messages() {
			n++
			if md, err := m.Metadata(); err == nil {
				last = md.NumPending
			}
			_, env, err := events.Decode(ctx, m.Data(), nil)
			if err != nil || env.GetPayload() == nil {
				continue
			}
			var ev agentv1.RunEvent
			if env.GetPayload().UnmarshalTo(&ev) != nil || ev.GetRunId() != runID {
				continue
			}
			if ev.GetSequence() <= after {
				continue
			}
			if before > 0 && ev.GetSequence() >= before {
				return nil
			}
			if err := fn(&ev); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("replay run %s: %w", runID, err)
		}
		if n == 0 || last == 0 {
			return nil
		}
	}
}
