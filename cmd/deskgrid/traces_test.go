package main

import (
	"context"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
)

// otlpReceiver is an OTLP/gRPC trace collector in the test process: what
// deskgrid's -otlp-endpoint exports arrives here.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) all() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

func startOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	r := &otlpReceiver{}
	srv := grpcservertest.Start(t, func(s grpc.ServiceRegistrar) { coltracepb.RegisterTraceServiceServer(s, r) }, grpcservertest.Options{})
	return r, srv.Addr
}

// TestTraceOfACreate sends a create through the REST gateway of a real
// `deskgrid up` with a traceparent of its own and reads, from the OTLP the
// process exports, that the gateway, the session service, the node's
// sandbox and display calls and the state-change publishes form one tree in
// that trace, and that the history's consumer span of a published event
// links back to its publish.
func TestTraceOfACreate(t *testing.T) {
	rec, endpoint := startOTLPReceiver(t)
	// Export every 50 ms instead of every 5 s.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	p := startUp(t, t.TempDir(), t.TempDir(), "-otlp-endpoint", endpoint)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest("POST", p.httpURL+"/v1/sessions", strings.NewReader(`{"display":{"width":640,"height":480}}`))
	req.Header.Set("Authorization", "Bearer "+p.key)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create: %s", resp.Status)
	}

	want := []string{
		"deskgrid.session.v1.SessionService/CreateSession",
		"deskgrid.sandbox.v1.SandboxService/CreateSandbox",
		"deskgrid.display.v1.DisplayService/CreateDisplay",
		"deskgrid.display.v1.DisplayService/Screenshot",
		"publish session.state_changed.v1",
	}
	var (
		inTrace  []*tracepb.Span
		consumer *tracepb.Span
	)
	deadline := time.Now().Add(30 * time.Second)
	for {
		inTrace, consumer = nil, nil
		all := rec.all()
		publishes := map[string]bool{}
		for _, s := range all {
			if hex.EncodeToString(s.GetTraceId()) == traceID {
				inTrace = append(inTrace, s)
				if strings.HasPrefix(s.GetName(), "publish ") {
					publishes[hex.EncodeToString(s.GetSpanId())] = true
				}
			}
		}
		for _, s := range all {
			if s.GetName() != "consume session.state_changed.v1" {
				continue
			}
			for _, l := range s.GetLinks() {
				if hex.EncodeToString(l.GetTraceId()) == traceID && publishes[hex.EncodeToString(l.GetSpanId())] {
					consumer = s
				}
			}
		}
		if missing := missingSpans(inTrace, want); len(missing) == 0 && consumer != nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after 30 s: spans %v missing from trace %s; history consumer span linked to a publish: %v\nspans: %v", missing, traceID, consumer != nil, spanNames(inTrace))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// One tree: every span's parent is in the trace, but the gateway's,
	// whose parent is the caller's span.
	ids := map[string]bool{}
	for _, s := range inTrace {
		ids[hex.EncodeToString(s.GetSpanId())] = true
	}
	var roots []*tracepb.Span
	for _, s := range inTrace {
		if !ids[hex.EncodeToString(s.GetParentSpanId())] {
			roots = append(roots, s)
			if got := hex.EncodeToString(s.GetParentSpanId()); got != "00f067aa0ba902b7" {
				t.Errorf("span %q has parent %s, in no trace", s.GetName(), got)
			}
		}
	}
	if len(roots) != 1 || roots[0].GetKind() != tracepb.Span_SPAN_KIND_SERVER || !strings.HasPrefix(roots[0].GetName(), "POST ") {
		t.Errorf("spans under the caller's span: %v, want the gateway's HTTP server span only", spanNames(roots))
	}
	// The node's spans are children of the session service's client calls.
	for _, s := range inTrace {
		if s.GetName() == want[1] && s.GetKind() == tracepb.Span_SPAN_KIND_SERVER && s.GetParentSpanId() == nil {
			t.Errorf("CreateSandbox server span has no parent")
		}
	}
	if hex.EncodeToString(consumer.GetTraceId()) == traceID {
		t.Errorf("the consumer span should start its own trace and link to the publish")
	}
}

func missingSpans(spans []*tracepb.Span, want []string) []string {
	have := map[string]bool{}
	for _, s := range spans {
		have[s.GetName()] = true
	}
	var out []string
	for _, w := range want {
		if !have[w] {
			out = append(out, w)
		}
	}
	return out
}

func spanNames(spans []*tracepb.Span) []string {
	out := make([]string, 0, len(spans))
	for _, s := range spans {
		out = append(out, s.GetName())
	}
	return out
}
