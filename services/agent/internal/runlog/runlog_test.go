package runlog

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
)

func startJetStream(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	_, _, js := natstest.Start(tb)
	if _, err := events.EnsureStream(context.Background(), js, events.StreamConfig(1, time.Hour)); err != nil {
		tb.Fatal(err)
	}
	return js
}

func newJetStreamLog(tb testing.TB, js jetstream.JetStream, runID string, ring int) *Log {
	tb.Helper()
	async, err := NewAsyncJetStream(js, 1024)
	if err != nil {
		tb.Fatal(err)
	}
	return New("s-1", runID, 0, ring, 0, &JetStreamSink{JS: async, Info: RunInfo{Tenant: "t", SessionID: "s-1", Provider: "p", Model: "m"}}, JetStreamReplayer{JS: js})
}

func event(i int) *agentv1.RunEvent {
	switch i % 4 {
	case 0:
		return &agentv1.RunEvent{Event: &agentv1.RunEvent_TextDelta{TextDelta: fmt.Sprint("t", i)}}
	case 1:
		return &agentv1.RunEvent{Event: &agentv1.RunEvent_ToolCall{ToolCall: &agentv1.ToolCall{Id: fmt.Sprint(i), Tool: "bash"}}}
	case 2:
		return &agentv1.RunEvent{Event: &agentv1.RunEvent_ToolCall{ToolCall: &agentv1.ToolCall{Id: fmt.Sprint(i), Tool: "bash", Finished: true}}}
	default:
		return &agentv1.RunEvent{Event: &agentv1.RunEvent_Usage{Usage: &agentv1.Usage{InputTokens: int64(i)}}}
	}
}

// readAll reads the log from after until it finishes and checks every
// event arrives exactly once, in order.
func readAll(t *testing.T, l *Log, after int64, want int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	next := after + 1
	err := l.Read(ctx, after, func(ev *agentv1.RunEvent) error {
		if ev.GetSequence() != next {
			return fmt.Errorf("got event %d, want %d", ev.GetSequence(), next)
		}
		next++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if next != want+1 {
		t.Fatalf("read up to %d, want %d", next-1, want)
	}
}

// A reader starting at 0 after the ring has rolled over gets the old events
// from JetStream and the rest from memory: all of them, once each, in
// order; so do readers that start while the run is going, and one that
// falls behind. Another run's events on the same session stay out.
func TestReadersGetEveryEventOnceAcrossTheRing(t *testing.T) {
	js := startJetStream(t)
	l := newJetStreamLog(t, js, "run-a", 64)
	other := newJetStreamLog(t, js, "run-b", 64)
	const n = 2000
	var wg sync.WaitGroup
	for _, after := range []int64{0, 0, 500} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readAll(t, l, after, n)
		}()
	}
	// A slow reader: it costs the run nothing and catches up from the log.
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		next := int64(1)
		err := l.Read(ctx, 0, func(ev *agentv1.RunEvent) error {
			if ev.GetSequence() != next {
				return fmt.Errorf("slow reader got %d, want %d", ev.GetSequence(), next)
			}
			if next%500 == 0 {
				time.Sleep(20 * time.Millisecond)
			}
			next++
			return nil
		})
		if err != nil || next != n+1 {
			t.Errorf("slow reader: %v at %d", err, next)
		}
	}()
	for i := range n {
		l.Append(event(i))
		if i%3 == 0 {
			other.Append(event(i))
		}
	}
	l.Finish()
	other.Finish()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	readAll(t, l, 0, n)
	readAll(t, l, 1234, n)

	// The stream holds each event once, under the history's event types.
	counts := map[string]int{}
	var got []int64
	err := JetStreamReplayer{JS: js}.Replay(ctx, "s-1", "run-a", 0, 0, func(ev *agentv1.RunEvent) error {
		got = append(got, ev.GetSequence())
		counts[TypeOf(ev)]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n || got[0] != 1 || got[n-1] != n {
		t.Fatalf("replayed %d events", len(got))
	}
	for _, typ := range []string{TypeMessage, TypeToolCall, TypeToolResult, TypeUsage} {
		if counts[typ] != n/4 {
			t.Fatalf("types %v", counts)
		}
	}
}

// Publishing the same event twice (a retry) stores it once.
func TestRetriedPublishIsStoredOnce(t *testing.T) {
	js := startJetStream(t)
	async, err := NewAsyncJetStream(js, 16)
	if err != nil {
		t.Fatal(err)
	}
	sink := &JetStreamSink{JS: async, Info: RunInfo{SessionID: "s-1"}}
	ev := &agentv1.RunEvent{Sequence: 1, RunId: "run-x", Event: &agentv1.RunEvent_TextDelta{TextDelta: "hi"}}
	ctx := context.Background()
	for range 3 {
		if err := sink.WriteBatch(ctx, []Item{{Event: ev}}); err != nil {
			t.Fatal(err)
		}
		if err := sink.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("%d messages stored", info.State.Msgs)
	}
	m, err := st.GetLastMsgForSubject(ctx, events.Subject("s-1", TypeMessage))
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(HeaderRunID) != "run-x" {
		t.Fatalf("headers %v", m.Header)
	}
	_, env, err := events.Decode(ctx, m.Data, nil)
	if err != nil || env.GetRunId() != "run-x" || env.GetSequence() != 1 || env.GetType() != TypeMessage {
		t.Fatalf("envelope %v, %v", env, err)
	}
}

// Without a durable log, a reader behind the ring is told its events are gone.
func TestReaderBehindRingWithoutLogIsTold(t *testing.T) {
	l := New("s-1", "run-a", 0, 8, 0, nil, nil)
	for i := range 20 {
		l.Append(event(i))
	}
	l.Finish()
	err := l.Read(context.Background(), 0, func(*agentv1.RunEvent) error { return nil })
	if err == nil {
		t.Fatal("read from 0 succeeded")
	}
	readAll(t, l, 12, 20)
}
