package ratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestTokenBucket(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	l := NewMemory(Config{Rate: 2, Burst: 3, Now: clk.now})
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("burst request %d refused", i)
		}
	}
	ok, d := l.Allow("a")
	if ok || d <= 0 || d > 500*time.Millisecond {
		t.Fatalf("over the burst: ok %v retry %v", ok, d)
	}
	// Refused requests do not use tokens up: after the delay one passes.
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another key is limited too")
	}
	clk.add(d)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("refused after the advertised delay")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("a second request fits in one token's time")
	}
	if RetryAfterSeconds(10*time.Millisecond) != 1 || RetryAfterSeconds(1500*time.Millisecond) != 2 {
		t.Fatal("RetryAfterSeconds")
	}
}

func TestBoundedMemory(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	l := NewMemory(Config{Rate: 1, Burst: 1, MaxKeys: 100, IdleTTL: time.Minute, Now: clk.now})
	for i := range 1000 {
		l.Allow(fmt.Sprint("k", i))
		if l.Len() > 100 {
			t.Fatalf("%d buckets", l.Len())
		}
	}
	// The most recent keys are kept with their state: still limited.
	if ok, _ := l.Allow("k999"); ok {
		t.Fatal("recent bucket was dropped")
	}
	// Idle buckets go as new callers arrive.
	clk.add(2 * time.Minute)
	l.Allow("fresh")
	if l.Len() != 1 {
		t.Fatalf("idle buckets kept: %d", l.Len())
	}
}

func TestHTTPMiddleware(t *testing.T) {
	l := limiter(t, NewMemory(Config{Rate: 0.001, Burst: 2}))
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	// Requests authenticated as two keys, one as the system principal, and
	// anonymous ones.
	as := func(p *auth.Principal, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if p != nil {
				r = r.WithContext(auth.WithPrincipal(r.Context(), *p))
			}
			h.ServeHTTP(w, r)
		})
	}
	keyA := httptest.NewServer(as(&auth.Principal{KeyID: "a"}, l.Middleware(inner)))
	keyB := httptest.NewServer(as(&auth.Principal{KeyID: "b"}, l.Middleware(inner)))
	system := httptest.NewServer(as(&auth.Principal{System: true, KeyID: auth.SystemKeyID}, l.Middleware(inner)))
	anon := httptest.NewServer(as(nil, l.Middleware(inner)))
	for _, s := range []*httptest.Server{keyA, keyB, system, anon} {
		t.Cleanup(s.Close)
	}
	get := func(base, path string) *http.Response {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for range 2 {
		if r := get(keyA.URL, "/x"); r.StatusCode != 200 {
			t.Fatalf("within burst: %d", r.StatusCode)
		}
	}
	r := get(keyA.URL, "/x")
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("over the limit: %d, Retry-After %q", r.StatusCode, r.Header.Get("Retry-After"))
	}
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Code != int(codes.ResourceExhausted) || body.Message == "" {
		t.Fatalf("429 body %+v %v", body, err)
	}
	if r := get(keyB.URL, "/x"); r.StatusCode != 200 {
		t.Fatalf("another key: %d", r.StatusCode)
	}
	for range 5 {
		if r := get(system.URL, "/x"); r.StatusCode != 200 {
			t.Fatalf("system principal limited: %d", r.StatusCode)
		}
	}
	for range 2 {
		get(anon.URL, "/x")
	}
	if r := get(anon.URL, "/x"); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("anonymous over the limit: %d", r.StatusCode)
	}
	if r := get(anon.URL, "/healthz"); r.StatusCode != 200 {
		t.Fatalf("health probe limited: %d", r.StatusCode)
	}
}

type agent struct {
	agentv1.UnimplementedAgentServiceServer
}

func (agent) GetRun(context.Context, *agentv1.GetRunRequest) (*agentv1.GetRunResponse, error) {
	return &agentv1.GetRunResponse{}, nil
}

func (agent) StreamRunEvents(*agentv1.StreamRunEventsRequest, grpc.ServerStreamingServer[agentv1.StreamRunEventsResponse]) error {
	return nil
}

func TestGRPCInterceptor(t *testing.T) {
	l := limiter(t, NewMemory(Config{Rate: 0.001, Burst: 1}))
	// Authentication stands first in the chain: here a stand-in that takes
	// the key id straight from metadata.
	fakeAuth := func(ctx context.Context) context.Context {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("key"); len(v) == 1 {
			return auth.WithPrincipal(ctx, auth.Principal{KeyID: v[0]})
		}
		return ctx
	}
	// The production server, which serves health itself.
	cc := grpcservertest.Serve(t, func(r grpc.ServiceRegistrar) {
		agentv1.RegisterAgentServiceServer(r, agent{})
	}, grpcservertest.Options{ServerOptions: append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(fakeAuth(ctx), req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, &ctxStream{ServerStream: ss, ctx: fakeAuth(ss.Context())})
		}),
	}, l.ServerOptions()...)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Health checks are never limited, even for an anonymous caller.
	for range 3 {
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	ac := agentv1.NewAgentServiceClient(cc)
	as := func(key string) context.Context { return metadata.AppendToOutgoingContext(ctx, "key", key) }
	if _, err := ac.GetRun(as("a"), &agentv1.GetRunRequest{}); err != nil {
		t.Fatal(err)
	}
	var hdr metadata.MD
	_, err := ac.GetRun(as("a"), &agentv1.GetRunRequest{}, grpc.Header(&hdr))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("over the limit: %v", err)
	}
	var info *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			info = ri
		}
	}
	if info == nil || info.GetRetryDelay().AsDuration() <= 0 || len(hdr.Get("retry-after")) != 1 {
		t.Fatalf("RetryInfo %v, header %v", st.Details(), hdr)
	}
	if _, err := ac.GetRun(as("b"), &agentv1.GetRunRequest{}); err != nil {
		t.Fatalf("another key: %v", err)
	}
	// Opening a stream counts too.
	s, err := ac.StreamRunEvents(as("b"), &agentv1.StreamRunEventsRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream over the limit: %v", err)
	}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

func BenchmarkAllow(b *testing.B) {
	l := NewMemory(Config{Rate: 1e9, Burst: 1e9})
	b.ReportAllocs()
	for b.Loop() {
		l.Allow("key:abc")
	}
}

func limiter(t testing.TB, c Counter, internalTokens ...string) *Limiter {
	t.Helper()
	l, err := New(Deps{Counter: c, Logger: slog.Default(), InternalTokens: internalTokens})
	if err != nil {
		t.Fatal(err)
	}
	return l
}
