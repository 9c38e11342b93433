// Package events publishes and reads deskgrid's event envelope on NATS.
//
// Every event is an eventsv1.Event published on the subject
// deskgrid.events.<session_id>.<type> and captured by one JetStream stream.
// Trace context travels in NATS headers.
package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

const (
	// SubjectPrefix starts every event subject.
	SubjectPrefix = "deskgrid.events"
	// SubjectAll matches every event.
	SubjectAll = SubjectPrefix + ".>"
	// StreamName is the JetStream stream that captures SubjectAll.
	StreamName = "DESKGRID_EVENTS"

	// TypeSessionStateChanged carries an eventsv1.SessionStateChanged.
	TypeSessionStateChanged = "session.state_changed.v1"

	// A recording of a session's screen began, ended with its video handed
	// to the history (videostore), or failed (its reason in the payload).
	// Each carries a displayv1.Recording.
	TypeRecordingStarted = "display.recording_started.v1"
	TypeRecordingStopped = "display.recording_stopped.v1"
	TypeRecordingFailed  = "display.recording_failed.v1"
)

var tracer = otel.Tracer("github.com/deskgrid/deskgrid/services/platform/events")

// Subject is where an event of type typ about a session is published.
func Subject(sessionID, typ string) string {
	return SubjectPrefix + "." + sessionID + "." + typ
}

// SessionSubject matches every event of one session.
func SessionSubject(sessionID string) string {
	return SubjectPrefix + "." + sessionID + ".>"
}

// Meta is what an event says about itself besides its payload.
type Meta struct {
	Type      string
	SessionID string
	Tenant    string
	Sequence  int64
	// RunID names the agent run the event belongs to, if any.
	RunID string
}

// Publisher sends events.
type Publisher interface {
	Publish(ctx context.Context, meta Meta, payload proto.Message) (*eventsv1.Event, error)
}

// NATSPublisher publishes to JetStream and waits for the stream's ack, so an
// event it returned without error is stored.
type NATSPublisher struct {
	js jetstream.JetStream
}

// NewPublisher returns a publisher on js.
func NewPublisher(js jetstream.JetStream) *NATSPublisher { return &NATSPublisher{js: js} }

// NewID returns a random event id.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Publish wraps payload in an envelope and publishes it.
func (p *NATSPublisher) Publish(ctx context.Context, meta Meta, payload proto.Message) (*eventsv1.Event, error) {
	if meta.Type == "" || meta.SessionID == "" || strings.ContainsAny(meta.SessionID, ".*> ") {
		return nil, fmt.Errorf("events: invalid meta %+v", meta)
	}
	ev := &eventsv1.Event{
		Id:        NewID(),
		Type:      meta.Type,
		Time:      timestamppb.Now(),
		Tenant:    meta.Tenant,
		SessionId: meta.SessionID,
		Sequence:  meta.Sequence,
		RunId:     meta.RunID,
	}
	if payload != nil {
		a, err := anypb.New(payload)
		if err != nil {
			return nil, fmt.Errorf("events: wrap payload: %w", err)
		}
		ev.Payload = a
	}
	data, err := proto.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("events: marshal: %w", err)
	}
	msg := nats.NewMsg(Subject(meta.SessionID, meta.Type))
	msg.Data = data
	// The publish is a span of the caller's trace; consumers link to it.
	ctx, span := tracer.Start(ctx, "publish "+meta.Type, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", SubjectPrefix+".<session>."+meta.Type),
			attribute.String("messaging.message.id", ev.Id)))
	defer span.End()
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(msg.Header))
	// The message id lets JetStream drop a duplicate when a publish is retried.
	if _, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.Id)); err != nil {
		metrics.PublishFailed(ctx, meta.Type)
		span.SetStatus(otelcodes.Error, err.Error())
		return nil, fmt.Errorf("events: publish %s: %w", msg.Subject, err)
	}
	return ev, nil
}

// Decode reads an envelope from a NATS message and returns it with the
// context carrying the trace the publisher sent.
func Decode(ctx context.Context, data []byte, header nats.Header) (context.Context, *eventsv1.Event, error) {
	ev := &eventsv1.Event{}
	if err := proto.Unmarshal(data, ev); err != nil {
		return ctx, nil, fmt.Errorf("events: decode: %w", err)
	}
	if header != nil {
		ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(header))
	}
	return ctx, ev, nil
}

// StartConsume starts the span of a consumer handling ev, whose Decode
// returned ctx: a new trace linked to the publisher's span rather than a
// child of it, as one consumer batch handles events of many traces. The
// caller ends the span.
func StartConsume(ctx context.Context, consumer string, ev *eventsv1.Event) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot(),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.consumer.group.name", consumer),
			attribute.String("messaging.message.id", ev.GetId()), attribute.String("deskgrid.event.type", ev.GetType()))}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return tracer.Start(ctx, "consume "+ev.GetType(), opts...)
}

// StreamConfig is the configuration of the event stream.
func StreamConfig(replicas int, maxAge time.Duration) jetstream.StreamConfig {
	if replicas < 1 {
		replicas = 1
	}
	return jetstream.StreamConfig{
		Name:        StreamName,
		Description: "every deskgrid event",
		Subjects:    []string{SubjectAll},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      maxAge,
		Replicas:    replicas,
		Duplicates:  2 * time.Minute,
		Discard:     jetstream.DiscardOld,
	}
}

// EnsureStream creates the event stream, or updates it to cfg.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("events: ensure stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// ErrClosed is returned by a subscription read after it was closed.
var ErrClosed = errors.New("events: subscription closed")
