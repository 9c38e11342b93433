package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
)

func withJetStream(tb testing.TB) func(*Deps) {
	_, _, js := natstest.Start(tb)
	if _, err := events.EnsureStream(context.Background(), js, events.StreamConfig(1, time.Hour)); err != nil {
		tb.Fatal(err)
	}
	return func(d *Deps) { d.JetStream = js }
}

// A client reading from 0 after the run's events have left memory (the
// ring rolled over, then the run itself was dropped) gets them all from
// JetStream, once each, in order.
func TestStreamRunEventsReplaysFromJetStream(t *testing.T) {
	var turns []func(provider.Request) (*provider.Response, error)
	for range 12 {
		turns = append(turns, toolTurn(call("b", "bash", `{"command":"echo hi"}`)))
	}
	cfg := DefaultConfig()
	cfg.EventRing = 16
	cfg.FinishedRunTTL = 50 * time.Millisecond
	h := newHarness(t, cfg, fixed(&scripted{turns: turns}), withJetStream(t))
	ctx := context.Background()
	resp, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetId()
	// Read live from the start while the run goes.
	var live []*agentv1.RunEvent
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		live = collect(t, h.client, id, 0)
	}()
	run := waitState(t, h.client, id, agentv1.RunState_RUN_STATE_SUCCEEDED)
	wg.Wait()
	n := run.GetEventSequence()
	if n < 3*int64(cfg.EventRing) {
		t.Fatalf("only %d events", n)
	}
	check := func(evs []*agentv1.RunEvent, after int64) {
		t.Helper()
		if int64(len(evs)) != n-after {
			t.Fatalf("%d events after %d, want %d", len(evs), after, n-after)
		}
		for i, ev := range evs {
			if ev.GetSequence() != after+int64(i)+1 {
				t.Fatalf("event %d has sequence %d", i, ev.GetSequence())
			}
		}
	}
	check(live, 0)
	check(collect(t, h.client, id, 0), 0)
	// Once the run has left memory, everything comes from JetStream.
	deadline := time.Now().Add(10 * time.Second)
	for h.svc.live(id) != nil {
		if time.Now().After(deadline) {
			t.Fatal("finished run never left memory")
		}
		time.Sleep(5 * time.Millisecond)
	}
	check(collect(t, h.client, id, 0), 0)
	check(collect(t, h.client, id, 7), 7)
}

// instant answers every turn at once with a screenshot request.
type instant struct {
	mu    sync.Mutex
	last  time.Time
	steps []time.Duration
}

func (p *instant) Name() string                      { return "instant" }
func (p *instant) DefaultScreen(w, h int) (int, int) { return w, h }
func (p *instant) Turn(_ context.Context, _ provider.Request, onDelta func(provider.Delta)) (*provider.Response, error) {
	now := time.Now()
	p.mu.Lock()
	if !p.last.IsZero() {
		p.steps = append(p.steps, now.Sub(p.last))
	}
	p.mu.Unlock()
	onDelta(provider.Delta{Kind: provider.DeltaText, Text: "looking"})
	resp := &provider.Response{Message: provider.Message{Role: provider.RoleAssistant, Blocks: []provider.Block{
		{Kind: provider.BlockText, Text: "looking"},
		{Kind: provider.BlockToolCall, ToolCall: call("s", "computer", `{"action":"screenshot"}`)},
	}}, StopReason: "tool_use", Usage: provider.Usage{InputTokens: 1000, OutputTokens: 10}}
	p.mu.Lock()
	p.last = time.Now()
	p.mu.Unlock()
	return resp, nil
}

// BenchmarkStepOverhead is what a step costs besides the model: tool
// dispatch, a 1280x800 screenshot over gRPC, events to JetStream, the record
// and the conversation, with a provider that answers at once. Runs are 50
// steps long, like real ones, so the conversation stays a realistic size.
func BenchmarkStepOverhead(b *testing.B) {
	const runSteps = 50
	var steps []time.Duration
	var mu sync.Mutex
	n := 0
	var cur *instant
	h := newHarness(b, DefaultConfig(), func(context.Context, provider.Config) (provider.Provider, error) {
		mu.Lock()
		defer mu.Unlock()
		cur = &instant{}
		return cur, nil
	}, withJetStream(b))
	h.node.png = desktopPNG(b)
	ctx := context.Background()
	b.ResetTimer()
	for n < b.N {
		resp, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", MaxSteps: int32(min(runSteps, b.N-n) + 1)})
		if err != nil {
			b.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; {
			r, err := h.client.GetRun(ctx, &agentv1.GetRunRequest{RunId: resp.GetRun().GetId()})
			if err != nil {
				b.Fatal(err)
			}
			if terminal(r.GetRun().GetState()) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("run still %v", r.GetRun().GetState())
			}
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		p := cur
		mu.Unlock()
		p.mu.Lock()
		steps = append(steps, p.steps...)
		n += len(p.steps)
		p.mu.Unlock()
		if len(p.steps) == 0 {
			n++
		}
	}
	b.StopTimer()
	if len(steps) == 0 {
		return
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i] < steps[j] })
	b.ReportMetric(float64(steps[len(steps)/2].Microseconds())/1000, "p50-ms/step")
	b.ReportMetric(float64(steps[len(steps)*99/100].Microseconds())/1000, "p99-ms/step")
	b.ReportMetric(float64(len(h.node.png))/1024, "KiB/screenshot")
}

// BenchmarkEventsToStreamingClient: events appended by a run, published to
// JetStream and streamed over gRPC to a client, which must see every one.
func BenchmarkEventsToStreamingClient(b *testing.B) {
	p := &scripted{block: make(chan struct{})}
	deps := withJetStream(b)
	var js jetstream.JetStream
	h := newHarness(b, DefaultConfig(), fixed(p), deps, func(d *Deps) { js = d.JetStream })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", Options: &agentv1.RunOptions{SkipInputLease: true}})
	if err != nil {
		b.Fatal(err)
	}
	id := resp.GetRun().GetId()
	r := h.svc.live(id)
	start := r.log.Sequence()
	for r.log.Sequence() < 3 {
		time.Sleep(time.Millisecond)
		start = r.log.Sequence()
	}
	st, err := h.client.StreamRunEvents(ctx, &agentv1.StreamRunEventsRequest{RunId: id, AfterSequence: start})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		next := start + 1
		for next <= start+int64(b.N) {
			m, err := st.Recv()
			if err != nil {
				done <- err
				return
			}
			if s := m.GetEvent().GetSequence(); s != next {
				if s < next {
					continue // a state event from before the timer
				}
				done <- &lostError{want: next, got: s}
				return
			}
			next++
		}
		done <- nil
	}()
	b.ResetTimer()
	t0 := time.Now()
	for range b.N {
		r.log.Append(&agentv1.RunEvent{Event: &agentv1.RunEvent_TextDelta{TextDelta: "0123456789abcdef0123456789abcdef"}, Step: 1})
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	close(p.block)
	waitState(b, h.client, id, agentv1.RunState_RUN_STATE_SUCCEEDED)
	// And every one reached JetStream.
	fctx, fcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer fcancel()
	r.log.Finish()
	if err := r.log.Flush(fctx); err != nil {
		b.Fatal(err)
	}
	stream, err := js.Stream(fctx, events.StreamName)
	if err != nil {
		b.Fatal(err)
	}
	info, err := stream.Info(fctx)
	if err != nil {
		b.Fatal(err)
	}
	if lost := r.log.Sequence() - int64(info.State.Msgs); lost != 0 {
		b.Fatalf("%d of %d events in JetStream", info.State.Msgs, r.log.Sequence())
	}
	b.ReportMetric(0, "lost")
}

type lostError struct{ want, got int64 }

func (e *lostError) Error() string {
	return fmt.Sprintf("event lost: wanted %d, got %d", e.want, e.got)
}

// What a run publishes is what the history files: its event types, the run
// id in the envelope, and the content in top-level payload fields
// (docs/history.md), screenshots with their image.
func TestPublishedEventsSpeakTheHistorysFormat(t *testing.T) {
	p := &scripted{turns: []func(provider.Request) (*provider.Response, error){
		toolTurn(call("t1", "computer", `{"action":"screenshot"}`)),
		toolTurn(call("t2", "bash", `{"command":"echo hi"}`)),
	}}
	var js jetstream.JetStream
	h := newHarness(t, DefaultConfig(), fixed(p), withJetStream(t), func(d *Deps) { js = d.JetStream })
	ctx := context.Background()
	resp, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "look around", Provider: "anthropic", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetId()
	run := waitState(t, h.client, id, agentv1.RunState_RUN_STATE_SUCCEEDED)
	cons, err := js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.SessionSubject("s-1")}})
	if err != nil {
		t.Fatal(err)
	}
	byType := map[string][]map[string]any{}
	for got := int64(0); got < run.GetEventSequence(); got++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %d of %d events: %v", got, run.GetEventSequence(), err)
		}
		_, env, err := events.Decode(ctx, m.Data(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if env.GetRunId() != id || env.GetTenant() != DefaultTenant || m.Headers().Get("Deskgrid-Run-Id") != id {
			t.Fatalf("envelope %v", env)
		}
		b, err := protojson.Marshal(env.GetPayload())
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]any
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		if fields["runId"] != id {
			t.Fatalf("payload %s", b)
		}
		byType[env.GetType()] = append(byType[env.GetType()], fields)
	}
	has := func(typ, field string, want any) {
		t.Helper()
		for _, f := range byType[typ] {
			if want == nil && f[field] != nil || f[field] == want {
				return
			}
		}
		t.Fatalf("no %s event with %s = %v: %v", typ, field, want, byType[typ])
	}
	has("agent.message.v1", "text", "look around")
	has("agent.message.v1", "role", "user")
	has("agent.tool_call.v1", "tool", "bash")
	has("agent.tool_call.v1", "inputJson", `{"command":"echo hi"}`)
	has("agent.tool_result.v1", "output", "ran: echo hi\n")
	has("agent.screenshot.v1", "data", nil)
	has("agent.screenshot.v1", "contentType", "image/png")
	has("agent.usage.v1", "inputTokens", "100")
	has("agent.usage.v1", "provider", "anthropic")
	has("agent.run_state_changed.v1", "state", "RUN_STATE_SUCCEEDED")
}

// desktopPNG is a 1280x800 screen with windows, text-like detail and a
// gradient, about the size of a real desktop's screenshot.
func desktopPNG(tb testing.TB) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 1280, 800))
	rnd := rand.New(rand.NewPCG(1, 2))
	for y := range 800 {
		for x := range 1280 {
			img.Set(x, y, color.RGBA{uint8(x / 5), uint8(y / 4), 160, 255})
		}
	}
	// Windows with lines of "text".
	for w := range 6 {
		x0, y0 := 60+w*180, 40+w*90
		for y := y0; y < y0+360; y++ {
			for x := x0; x < x0+520; x++ {
				c := color.RGBA{245, 245, 245, 255}
				if (y-y0)%18 < 11 && (y-y0) > 30 && rnd.IntN(3) == 0 {
					c = color.RGBA{30, 30, 30, 255}
				}
				img.Set(x, y, c)
			}
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}
