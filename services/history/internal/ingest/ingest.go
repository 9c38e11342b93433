// Package ingest copies events from the JetStream event stream into the
// history store. It reads through a durable pull consumer in batches, stores
// each batch in one transaction and acknowledges the messages only after the
// commit, so an event is acknowledged only once it is stored and a crash at
// any point means redelivery, which the store's idempotent append absorbs.
package ingest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	// Registers the event payload types, so payloads become readable JSON.
	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	_ "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	"github.com/deskgrid/deskgrid/services/history/internal/blob"
	"github.com/deskgrid/deskgrid/services/history/internal/payload"
	"github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/videostore"
)

// HeaderRunID is the NATS header that, when set, names the agent run an
// event belongs to. The envelope's run_id names it first; a payload with a
// top-level run_id field names it last.
const HeaderRunID = "Deskgrid-Run-Id"

// Config tunes ingestion. Zero values take the defaults.
type Config struct {
	// Durable is the consumer name; replicas sharing it share the work.
	Durable string
	// BatchSize is the most events stored in one transaction.
	BatchSize int
	// BatchWait is how long a batch, once it has its first event, waits
	// for more before it is stored.
	BatchWait time.Duration
	// MaxAckPending bounds the events delivered but not yet acknowledged.
	MaxAckPending int
	// AckWait is how long JetStream waits for an acknowledgement before it
	// delivers an event again.
	AckWait time.Duration
	// RetryDelay is how long a batch the store refused waits before it is
	// delivered again.
	RetryDelay time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Durable:       "history",
		BatchSize:     256,
		BatchWait:     50 * time.Millisecond,
		MaxAckPending: 4096,
		AckWait:       30 * time.Second,
		RetryDelay:    time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Durable == "" {
		c.Durable = d.Durable
	}
	if c.BatchSize <= 0 {
		c.BatchSize = d.BatchSize
	}
	if c.BatchWait <= 0 {
		c.BatchWait = d.BatchWait
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = max(d.MaxAckPending, 2*c.BatchSize)
	}
	if c.AckWait <= 0 {
		c.AckWait = d.AckWait
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = d.RetryDelay
	}
	return c
}

// Stats counts what an Ingester did.
type Stats struct {
	// Stored is the number of new entries committed.
	Stored uint64
	// Duplicates is the number of events already stored (redeliveries).
	Duplicates uint64
	// Rejected is the number of messages that are not valid events; they are
	// terminated so they do not block the stream.
	Rejected uint64
	// StoreFailures is the number of batches the store or the blob store
	// refused.
	StoreFailures uint64
}

// Ingester runs the consumer loop.
type Ingester struct {
	cfg    Config
	store  store.Store
	blobs  blob.Store
	videos *videostore.Store
	log    *slog.Logger
	nc     *nats.Conn
	iter   jetstream.MessagesContext
	cancel context.CancelFunc
	done   chan struct{}
	closed sync.Once

	stored, duplicates, rejected, failures atomic.Uint64
}

// Start creates or updates the durable consumer on the event stream (which
// must exist) and starts ingesting. Screenshots go to blobs; with blobs nil
// they stay inline in their entries. It stops on Close or when ctx ends.
func Start(ctx context.Context, cfg Config, js jetstream.JetStream, st store.Store, blobs blob.Store, logger *slog.Logger) (*Ingester, error) {
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.Default()
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, events.StreamName, jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		Description:   "deskgrid history ingestion",
		FilterSubject: events.SubjectAll,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxAckPending: cfg.MaxAckPending,
		// Unlimited: an event that cannot be stored yet is retried, never dropped.
		MaxDeliver: -1,
	})
	if err != nil {
		return nil, fmt.Errorf("ingest: consumer %s: %w", cfg.Durable, err)
	}
	// Recordings' videos arrive through the object store their end events
	// name.
	videos, err := videostore.Open(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(min(2*cfg.BatchSize, cfg.MaxAckPending)))
	if err != nil {
		return nil, fmt.Errorf("ingest: consume %s: %w", cfg.Durable, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in := &Ingester{
		cfg:    cfg,
		store:  st,
		blobs:  blobs,
		videos: videos,
		log:    logger.With("component", "history.ingest", "durable", cfg.Durable),
		nc:     js.Conn(),
		iter:   iter,
		cancel: cancel,
		done:   make(chan struct{}),
	}
	go in.run(runCtx)
	// The caller's ctx bounds the ingester's life as well as Start.
	go func() {
		select {
		case <-ctx.Done():
			in.stop()
		case <-in.done:
		}
	}()
	return in, nil
}

// Stats returns the counters so far.
func (in *Ingester) Stats() Stats {
	return Stats{
		Stored:        in.stored.Load(),
		Duplicates:    in.duplicates.Load(),
		Rejected:      in.rejected.Load(),
		StoreFailures: in.failures.Load(),
	}
}

// Close stops pulling, stores and acknowledges what was already delivered,
// and returns when the loop has ended. If ctx ends first the batch in flight
// is abandoned unacknowledged, to be redelivered to the next consumer.
func (in *Ingester) Close(ctx context.Context) error {
	in.closed.Do(func() { in.iter.Drain() })
	select {
	case <-in.done:
		in.cancel()
		// Acks are sent without waiting; push them out so the events are not
		// handed to the next consumer again.
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
		}
		if err := in.nc.FlushWithContext(ctx); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("ingest: flush acks: %w", err)
		}
		return nil
	case <-ctx.Done():
		in.stop()
		<-in.done
		return fmt.Errorf("ingest: close: %w", ctx.Err())
	}
}

// stop ends the loop at once.
func (in *Ingester) stop() {
	in.cancel()
	in.iter.Stop()
}

func (in *Ingester) run(ctx context.Context) {
	defer close(in.done)
	batch := make([]jetstream.Msg, 0, in.cfg.BatchSize)
	for {
		first, err := in.iter.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			// Missed heartbeats and reconnects: the iterator recovers by itself.
			in.log.Warn("reading events", "err", err)
			if !sleep(ctx, 100*time.Millisecond) {
				return
			}
			continue
		}
		batch = append(batch[:0], first)
		ended := false
		deadline := time.Now().Add(in.cfg.BatchWait)
		for len(batch) < in.cfg.BatchSize {
			wait := time.Until(deadline)
			if wait <= 0 {
				break
			}
			m, err := in.iter.Next(jetstream.NextMaxWait(wait))
			if err != nil {
				ended = errors.Is(err, jetstream.ErrMsgIteratorClosed)
				if !ended && !errors.Is(err, nats.ErrTimeout) {
					in.log.Warn("reading events", "err", err)
				}
				break
			}
			batch = append(batch, m)
		}
		in.process(ctx, batch)
		if ended || ctx.Err() != nil {
			return
		}
	}
}

// process stores one batch and settles its messages.
func (in *Ingester) process(ctx context.Context, batch []jetstream.Msg) {
	entries := make([]store.Entry, 0, len(batch))
	msgs := make([]jetstream.Msg, 0, len(batch))
	for _, m := range batch {
		e, err := toEntry(ctx, m)
		if err != nil {
			in.rejected.Add(1)
			in.log.Error("dropping a message that is not a valid event", "subject", m.Subject(), "err", err)
			if err := m.TermWithReason(err.Error()); err != nil {
				in.log.Warn("terminating message", "subject", m.Subject(), "err", err)
			}
			continue
		}
		entries = append(entries, e)
		msgs = append(msgs, m)
	}
	if len(entries) == 0 {
		return
	}
	// Blobs are written before the entries that refer to them commit; a
	// blob whose entry never commits is collected later.
	var err error
	var taken []string
	for i := range entries {
		if err = payload.Prepare(ctx, &entries[i], in.blobs); err != nil {
			break
		}
		var obj string
		if obj, err = in.takeVideo(ctx, &entries[i]); err != nil {
			break
		}
		if obj != "" {
			taken = append(taken, obj)
		}
	}
	n := 0
	if err == nil {
		n, err = in.store.Append(ctx, entries)
	}
	if err != nil {
		in.failures.Add(1)
		if ctx.Err() != nil {
			// Shutting down: leave the messages to AckWait and the next consumer.
			return
		}
		in.log.Error("storing events; they will be delivered again", "events", len(entries), "retry_in", in.cfg.RetryDelay, "err", err)
		for _, m := range msgs {
			_ = m.NakWithDelay(in.cfg.RetryDelay)
		}
		// Give a failing database room instead of spinning on it.
		sleep(ctx, in.cfg.RetryDelay)
		return
	}
	in.stored.Add(uint64(n))
	in.duplicates.Add(uint64(len(entries) - n))
	// The videos are blobs now, referred to by committed entries.
	for _, obj := range taken {
		if err := in.videos.Delete(ctx, obj); err != nil {
			in.log.Warn("removing a recording's video from the object store", "object", obj, "err", err)
		}
	}
	for _, m := range msgs {
		// A lost ack means one redelivery, which the store drops.
		if err := m.Ack(); err != nil {
			in.log.Warn("acknowledging event", "subject", m.Subject(), "err", err)
		}
	}
}

// takeVideo moves the video a recording's end event names from the object
// store into the blob store, and makes the entry refer to it. It returns
// the object taken, to delete once the entry is committed. A video already
// gone (taken by an earlier delivery, or expired) leaves the entry as it is.
func (in *Ingester) takeVideo(ctx context.Context, e *store.Entry) (string, error) {
	obj := payload.VideoObject(e)
	if obj == "" || in.blobs == nil {
		return "", nil
	}
	r, err := in.videos.Get(ctx, obj)
	if errors.Is(err, videostore.ErrNotFound) {
		in.log.Warn("a recording's video is not in the object store", "object", obj, "event", e.ID)
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer r.Close()
	hash, _, err := in.blobs.PutFrom(ctx, r)
	if err != nil {
		return "", fmt.Errorf("store the video of %s: %w", obj, err)
	}
	if err := payload.SetVideoBlob(e, hash); err != nil {
		return "", err
	}
	return obj, nil
}

// toEntry turns a message into an entry, or says why it is not an event.
func toEntry(ctx context.Context, m jetstream.Msg) (store.Entry, error) {
	meta, err := m.Metadata()
	if err != nil {
		return store.Entry{}, fmt.Errorf("no JetStream metadata: %w", err)
	}
	ctx, ev, err := events.Decode(ctx, m.Data(), m.Headers())
	if err != nil {
		return store.Entry{}, err
	}
	_, span := events.StartConsume(ctx, "history", ev)
	defer span.End()
	if err := validate(ev); err != nil {
		return store.Entry{}, err
	}
	data, runID := payloadJSON(ev.GetPayload())
	if h := m.Headers().Get(HeaderRunID); h != "" && !strings.ContainsRune(h, 0) {
		runID = h
	}
	if r := ev.GetRunId(); r != "" && !strings.ContainsRune(r, 0) {
		runID = r
	}
	t := meta.Timestamp
	if ev.GetTime() != nil && ev.GetTime().IsValid() {
		t = ev.GetTime().AsTime()
	}
	return store.Entry{
		ID:        ev.GetId(),
		SessionID: ev.GetSessionId(),
		RunID:     runID,
		Sequence:  int64(meta.Sequence.Stream),
		Type:      ev.GetType(),
		Time:      t.UTC(),
		Tenant:    ev.GetTenant(),
		Data:      data,
	}, nil
}

func validate(ev *eventsv1.Event) error {
	for _, f := range []struct{ name, v string }{
		{"id", ev.GetId()}, {"type", ev.GetType()}, {"session_id", ev.GetSessionId()},
	} {
		if f.v == "" {
			return fmt.Errorf("event has no %s", f.name)
		}
	}
	// PostgreSQL text cannot hold NUL; refuse it here rather than fail a batch.
	for _, v := range []string{ev.GetId(), ev.GetType(), ev.GetSessionId(), ev.GetTenant()} {
		if strings.ContainsRune(v, 0) {
			return errors.New("event has a NUL character in its envelope")
		}
	}
	return nil
}

// rawPayload is how a payload whose type is not known here is kept: its type
// URL and its bytes, so nothing is lost and it can be decoded later.
type rawPayload struct {
	Type  string `json:"@type"`
	Value string `json:"value"`
}

// payloadJSON renders a payload as protojson's form of an Any (an object
// with "@type" and the message's fields) and finds its run_id field.
func payloadJSON(a *anypb.Any) (data, runID string) {
	if a == nil {
		return "", ""
	}
	if m, err := a.UnmarshalNew(); err == nil {
		if b, ok := anyJSON(a.GetTypeUrl(), m); ok {
			return b, runIDField(m.ProtoReflect())
		}
	}
	b, _ := json.Marshal(rawPayload{Type: a.GetTypeUrl(), Value: base64.StdEncoding.EncodeToString(a.GetValue())})
	return string(b), ""
}

// anyJSON is protojson.Marshal of the Any holding m, without decoding the
// payload a second time: "@type" is spliced in front of m's own fields.
func anyJSON(typeURL string, m proto.Message) (string, bool) {
	if m.ProtoReflect().Descriptor().FullName().Parent() == "google.protobuf" {
		// Well-known types have their own JSON forms, wrapped as {"@type","value"}.
		a, err := anypb.New(m)
		if err != nil {
			return "", false
		}
		b, err := protojson.Marshal(a)
		return string(b), err == nil
	}
	body, err := protojson.Marshal(m)
	if err != nil {
		return "", false
	}
	u, _ := json.Marshal(typeURL)
	rest := bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(body), []byte("{")))
	var b strings.Builder
	b.Grow(len(u) + len(rest) + 12)
	b.WriteString(`{"@type":`)
	b.Write(u)
	if !bytes.HasPrefix(rest, []byte("}")) {
		b.WriteByte(',')
	}
	b.Write(rest)
	return b.String(), true
}

func runIDField(m protoreflect.Message) string {
	fd := m.Descriptor().Fields().ByName("run_id")
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return ""
	}
	return m.Get(fd).String()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
