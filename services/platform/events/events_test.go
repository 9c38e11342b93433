package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
)

func startJS(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	_, nc, js := natstest.Start(t)
	return nc, js
}

func TestPublishStoresEnvelopeWithTrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, js := startJS(t)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig(1, time.Hour)); err != nil {
		t.Fatal(err)
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	sctx, span := tp.Tracer("test").Start(ctx, "publish")
	defer span.End()

	pub := events.NewPublisher(js)
	payload := &eventsv1.SessionStateChanged{From: sessionv1.SessionState_SESSION_STATE_PENDING, To: sessionv1.SessionState_SESSION_STATE_STARTING}
	sent, err := pub.Publish(sctx, events.Meta{Type: events.TypeSessionStateChanged, SessionID: "s-abc", Tenant: "t1", Sequence: 3, RunID: "r-1"}, payload)
	if err != nil {
		t.Fatal(err)
	}

	stream, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stream.GetLastMsgForSubject(ctx, events.Subject("s-abc", events.TypeSessionStateChanged))
	if err != nil {
		t.Fatal(err)
	}
	gotCtx, got, err := events.Decode(context.Background(), raw.Data, raw.Header)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetId() != sent.GetId() || got.GetType() != events.TypeSessionStateChanged || got.GetSessionId() != "s-abc" || got.GetTenant() != "t1" || got.GetSequence() != 3 || got.GetRunId() != "r-1" {
		t.Fatalf("envelope = %v, sent %v", got, sent)
	}
	var p eventsv1.SessionStateChanged
	if err := got.GetPayload().UnmarshalTo(&p); err != nil {
		t.Fatal(err)
	}
	if p.GetTo() != sessionv1.SessionState_SESSION_STATE_STARTING {
		t.Fatalf("payload = %v", &p)
	}
	if trace.SpanContextFromContext(gotCtx).TraceID() != span.SpanContext().TraceID() {
		t.Fatal("trace context did not travel in the headers")
	}
}

func TestPublishRejectsBadMeta(t *testing.T) {
	_, js := startJS(t)
	pub := events.NewPublisher(js)
	for _, m := range []events.Meta{
		{Type: "", SessionID: "s-1"},
		{Type: "x.v1", SessionID: ""},
		{Type: "x.v1", SessionID: "s.1"},
		{Type: "x.v1", SessionID: "s>"},
	} {
		if _, err := pub.Publish(context.Background(), m, nil); err == nil {
			t.Errorf("Publish(%+v) succeeded", m)
		}
	}
}

func TestPublishWithoutStreamFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, js := startJS(t)
	_, err := events.NewPublisher(js).Publish(ctx, events.Meta{Type: "x.v1", SessionID: "s-1"}, nil)
	if err == nil {
		t.Fatal("publish with no stream to store it succeeded")
	}
}
