package runlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
)

// Event types of run events in the deskgrid event stream, as the history
// service files them (docs/history.md); the payload is always an
// agentv1.RunEventRecord, and the envelope's run_id names the run.
const (
	TypeMessage    = "agent.message.v1"
	TypeToolCall   = "agent.tool_call.v1"
	TypeToolResult = "agent.tool_result.v1"
	TypeScreenshot = "agent.screenshot.v1"
	TypeUsage      = "agent.usage.v1"
	TypeRunState   = "agent.run_state_changed.v1"
)

// HeaderRunID names the run in the NATS headers too, for consumers that
// filter without decoding.
const HeaderRunID = "Deskgrid-Run-Id"

// TypeOf is the event type a run event is published as.
func TypeOf(ev *agentv1.RunEvent) string {
	switch e := ev.GetEvent().(type) {
	case *agentv1.RunEvent_ToolCall:
		if e.ToolCall.GetFinished() {
			return TypeToolResult
		}
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

// agentSubject matches every agent event of a session.
func agentSubject(sessionID string) string {
	return events.SubjectPrefix + "." + sessionID + ".agent.>"
}

// RunInfo is what the records of a run's events say about the run.
type RunInfo struct {
	Tenant, SessionID string
	Provider, Model   string
}

// Record is the published form of a run event: the event, and its content
// in the fields the history indexes. data is a screenshot's image.
func Record(info RunInfo, ev *agentv1.RunEvent, data []byte) *agentv1.RunEventRecord {
	r := &agentv1.RunEventRecord{RunId: ev.GetRunId(), Event: ev}
	switch e := ev.GetEvent().(type) {
	case *agentv1.RunEvent_TextDelta:
		r.Role, r.Text = "assistant", e.TextDelta
	case *agentv1.RunEvent_ThinkingDelta:
		r.Role, r.Thinking = "assistant", e.ThinkingDelta
	case *agentv1.RunEvent_UserMessage:
		r.Role, r.Text = "user", e.UserMessage
	case *agentv1.RunEvent_ToolCall:
		tc := e.ToolCall
		r.CallId, r.Tool, r.InputJson = tc.GetId(), tc.GetTool(), tc.GetInputJson()
		if tc.GetFinished() {
			r.Output, r.IsError = tc.GetOutput(), tc.GetIsError()
		}
	case *agentv1.RunEvent_Screenshot:
		sh := e.Screenshot
		r.CallId, r.ContentType, r.Width, r.Height, r.Data = sh.GetToolCallId(), sh.GetContentType(), sh.GetWidth(), sh.GetHeight(), data
	case *agentv1.RunEvent_Usage:
		u := e.Usage
		r.Provider, r.Model = info.Provider, info.Model
		r.InputTokens, r.OutputTokens, r.CacheReadTokens, r.CacheWriteTokens = u.GetInputTokens(), u.GetOutputTokens(), u.GetCacheReadTokens(), u.GetCacheWriteTokens()
	case *agentv1.RunEvent_State:
		r.State, r.Reason = e.State, ev.GetReason()
		r.Provider, r.Model = info.Provider, info.Model
	}
	return r
}

// Envelope wraps a run event in the deskgrid event envelope.
func Envelope(info RunInfo, ev *agentv1.RunEvent, data []byte) (*nats.Msg, error) {
	payload, err := anypb.New(Record(info, ev, data))
	if err != nil {
		return nil, fmt.Errorf("wrap run event: %w", err)
	}
	typ := TypeOf(ev)
	env := &eventsv1.Event{
		// The id is the run and sequence, so a retried publish is dropped
		// by JetStream's duplicate window instead of stored twice.
		Id:   ev.GetRunId() + "." + strconv.FormatInt(ev.GetSequence(), 10),
		Type: typ, Time: ev.GetTime(), Tenant: info.Tenant, SessionId: info.SessionID,
		Sequence: ev.GetSequence(), RunId: ev.GetRunId(), Payload: payload,
	}
	data, err = proto.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode run event: %w", err)
	}
	m := nats.NewMsg(events.Subject(info.SessionID, typ))
	m.Data = data
	m.Header.Set(HeaderRunID, ev.GetRunId())
	m.Header.Set(jetstream.MsgIDHeader, env.GetId())
	return m, nil
}

// runEvent reads the run event back from an envelope's payload.
func runEvent(env *eventsv1.Event) (*agentv1.RunEvent, bool) {
	var rec agentv1.RunEventRecord
	if env.GetPayload().UnmarshalTo(&rec) != nil || rec.GetEvent() == nil {
		return nil, false
	}
	return rec.GetEvent(), true
}

// JetStreamSink publishes a run's events asynchronously: a batch goes out
// without waiting between messages, and its acks are collected while the
// next batch is published, so a run costs no round trip per event and the
// stream is never idle waiting for acks. One sink serves one run's log.
type JetStreamSink struct {
	JS   jetstream.JetStream
	Info RunInfo
	// AckWait bounds the wait for a batch's acks; 0 means 10 s.
	AckWait time.Duration

	prev *inflight
}

// inflight is a published batch whose acks are not all in.
type inflight struct {
	msgs    []*nats.Msg
	seqs    []int64
	futures []jetstream.PubAckFuture
}

// NewAsyncJetStream returns a JetStream handle on js's connection whose
// async publishes are bounded to maxPending in flight.
func NewAsyncJetStream(js jetstream.JetStream, maxPending int) (jetstream.JetStream, error) {
	opts := js.Options()
	jo := []jetstream.JetStreamOpt{jetstream.WithPublishAsyncMaxPending(maxPending)}
	switch {
	case opts.Domain != "":
		return jetstream.NewWithDomain(js.Conn(), opts.Domain, jo...)
	case opts.APIPrefix != "" && opts.APIPrefix != jetstream.DefaultAPIPrefix:
		return jetstream.NewWithAPIPrefix(js.Conn(), opts.APIPrefix, jo...)
	default:
		return jetstream.New(js.Conn(), jo...)
	}
}

// WriteBatch implements Sink: it publishes items and waits for the acks
// of the batch before; Flush waits for the last one.
func (s *JetStreamSink) WriteBatch(ctx context.Context, items []Item) error {
	cur := &inflight{msgs: make([]*nats.Msg, len(items)), seqs: make([]int64, len(items)), futures: make([]jetstream.PubAckFuture, len(items))}
	maxPayload := s.JS.Conn().MaxPayload()
	var err error
	for i, it := range items {
		cur.seqs[i] = it.Event.GetSequence()
		m, e := Envelope(s.Info, it.Event, it.Data)
		if e == nil && int64(len(m.Data)) > maxPayload-1024 && it.Data != nil {
			// Too big for the server: the event goes without its image.
			m, e = Envelope(s.Info, it.Event, nil)
		}
		if e != nil {
			err = errors.Join(err, e)
			continue
		}
		cur.msgs[i] = m
		// A failed async publish (nil future) is retried when the batch settles.
		cur.futures[i], _ = s.JS.PublishMsgAsync(m)
	}
	err = errors.Join(err, s.settle(ctx, s.prev))
	s.prev = cur
	return err
}

// Flush implements Flusher: it waits for every published event's ack.
func (s *JetStreamSink) Flush(ctx context.Context) error {
	err := s.settle(ctx, s.prev)
	s.prev = nil
	return err
}

// settle waits for a batch's acks, republishing (synchronously, a few times,
// with the same message id) what failed.
func (s *JetStreamSink) settle(ctx context.Context, b *inflight) error {
	if b == nil {
		return nil
	}
	wait := s.AckWait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var failed []int
	for i, f := range b.futures {
		if b.msgs[i] == nil {
			continue
		}
		if f == nil {
			failed = append(failed, i)
			continue
		}
		select {
		case <-f.Ok():
		case <-f.Err():
			failed = append(failed, i)
		case <-timer.C:
			return fmt.Errorf("run events: no ack from the event stream within %s", wait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, i := range failed {
		var err error
		for attempt := range 5 {
			actx, cancel := context.WithTimeout(ctx, wait)
			_, err = s.JS.PublishMsg(actx, b.msgs[i])
			cancel()
			if err == nil {
				break
			}
			time.Sleep(time.Duration(50<<attempt) * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("publish run event %d: %w", b.seqs[i], err)
		}
	}
	return nil
}

// PublisherSink makes run events durable through a platform publisher, one
// acknowledged publish at a time; JetStreamSink is the fast path.
type PublisherSink struct {
	Publisher events.Publisher
	Info      RunInfo
}

// WriteBatch implements Sink.
func (p PublisherSink) WriteBatch(ctx context.Context, items []Item) error {
	for _, it := range items {
		ev := it.Event
		var err error
		for i := range 5 {
			_, err = p.Publisher.Publish(ctx, events.Meta{Type: TypeOf(ev), SessionID: p.Info.SessionID, Tenant: p.Info.Tenant, Sequence: ev.GetSequence()}, Record(p.Info, ev, it.Data))
			if err == nil {
				break
			}
			time.Sleep(time.Duration(50<<i) * time.Millisecond)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// JetStreamReplayer reads run events back from the event stream.
type JetStreamReplayer struct {
	JS jetstream.JetStream
}

// Replay implements Replayer. It reads the session's agent events with an
// ordered consumer, keeps the run's in the window and hands them over in
// sequence order, each once (a retried publish may have stored an event
// out of order).
func (r JetStreamReplayer) Replay(ctx context.Context, sessionID, runID string, after, before int64, fn func(*agentv1.RunEvent) error) error {
	cons, err := r.JS.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{agentSubject(sessionID)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("replay run %s: %w", runID, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("replay run %s: %w", runID, err)
	}
	found := map[int64]*agentv1.RunEvent{}
	for pending := info.NumPending; pending > 0; {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		// Asking for no more than are pending lets the fetch end as soon as
		// they arrive instead of waiting out its timeout.
		batch, err := cons.Fetch(int(min(pending, 1024)), jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			return fmt.Errorf("replay run %s: %w", runID, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if md, err := m.Metadata(); err == nil {
				pending = md.NumPending
			}
			if h := m.Headers().Get(HeaderRunID); h != "" && h != runID {
				continue
			}
			_, env, err := events.Decode(ctx, m.Data(), nil)
			if err != nil || env.GetPayload() == nil || (env.GetRunId() != "" && env.GetRunId() != runID) {
				continue
			}
			ev, ok := runEvent(env)
			if !ok || ev.GetRunId() != runID {
				continue
			}
			if seq := ev.GetSequence(); seq > after && (before <= 0 || seq < before) {
				found[seq] = ev
			}
		}
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("replay run %s: %w", runID, err)
		}
		if n == 0 {
			break
		}
	}
	seqs := make([]int64, 0, len(found))
	for seq := range found {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	for _, seq := range seqs {
		if err := fn(found[seq]); err != nil {
			return err
		}
	}
	return nil
}
