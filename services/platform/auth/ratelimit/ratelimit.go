// Package ratelimit limits request rates per API key: as HTTP middleware
// (429 with Retry-After) and gRPC interceptors (ResourceExhausted with a
// RetryInfo detail and a retry-after header), both over one Counter. Callers
// are told apart by their key (auth.Principal.KeyID), or by client address
// before authentication; the internal token is never limited.
//
// Counters: Memory (token buckets in this process, for one process such as
// `deskgrid up`) and Redis (GCRA in Redis, for a cluster, so N gateways or
// replicas together allow the limit once, not N times). Memory is bounded:
// at most MaxKeys buckets, least recently used dropped first, and buckets
// idle for IdleTTL dropped as new ones arrive.
//
// A call is counted once, where it enters deskgrid: a gateway that counted a
// REST or MCP request marks the gRPC calls it makes for it (CountedMD, a MAC
// under the internal token bound to the caller's authorization), and the
// services do not count marked calls again. Calls between services carry
// the internal token and are not counted at all.
package ratelimit

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

// Config tunes a Limiter.
type Config struct {
	// Rate is the sustained requests per second one caller may make.
	// Default 20.
	Rate float64
	// Burst is how many requests may come at once. Default 2*Rate.
	Burst int
	// MaxKeys bounds the buckets kept. Default 10000.
	MaxKeys int
	// IdleTTL drops a bucket not used for this long (a full bucket again,
	// so nothing is lost). Default 10m.
	IdleTTL time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// DefaultConfig is the configuration the defaults above describe.
func DefaultConfig() Config {
	return Config{Rate: 20, Burst: 40, MaxKeys: 10000, IdleTTL: 10 * time.Minute}
}

// Counter takes one request from key's allowance. When none is left it
// answers false and how long until one is.
type Counter interface {
	Take(ctx context.Context, key string) (ok bool, retryAfter time.Duration, err error)
}

// Memory holds one token bucket per caller, in this process.
type Memory struct {
	cfg Config

	mu    sync.Mutex
	lru   *list.List // of *bucket, most recent at the front
	byKey map[string]*list.Element
}

type bucket struct {
	key  string
	lim  *rate.Limiter
	last time.Time
}

// NewMemory returns an in-process counter; zero fields take DefaultConfig's
// values.
func NewMemory(cfg Config) *Memory {
	d := DefaultConfig()
	if cfg.Rate <= 0 {
		cfg.Rate = d.Rate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = max(1, int(math.Ceil(2*cfg.Rate)))
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = d.MaxKeys
	}
	if cfg.IdleTTL <= 0 {
		cfg.IdleTTL = d.IdleTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Memory{cfg: cfg, lru: list.New(), byKey: map[string]*list.Element{}}
}

// Take implements Counter; it never fails.
func (l *Memory) Take(_ context.Context, key string) (bool, time.Duration, error) {
	ok, d := l.Allow(key)
	return ok, d, nil
}

// Allow takes one token from key's bucket. When none is left it returns
// false and how long until one is.
func (l *Memory) Allow(key string) (ok bool, retryAfter time.Duration) {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var b *bucket
	if e, found := l.byKey[key]; found {
		b = e.Value.(*bucket)
		l.lru.MoveToFront(e)
	} else {
		l.sweepLocked(now)
		b = &bucket{key: key, lim: rate.NewLimiter(rate.Limit(l.cfg.Rate), l.cfg.Burst)}
		l.byKey[key] = l.lru.PushFront(b)
	}
	b.last = now
	r := b.lim.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// sweepLocked drops idle buckets from the back, then the least recently
// used until there is room for one more.
func (l *Memory) sweepLocked(now time.Time) {
	for e := l.lru.Back(); e != nil; e = l.lru.Back() {
		b := e.Value.(*bucket)
		if now.Sub(b.last) < l.cfg.IdleTTL && l.lru.Len() < l.cfg.MaxKeys {
			return
		}
		l.lru.Remove(e)
		delete(l.byKey, b.key)
	}
}

// Len is the number of buckets held.
func (l *Memory) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

// CallerKey names the caller of ctx for limiting: its key id, or "" for
// the internal token (not limited), or fallback when unauthenticated.
func CallerKey(ctx context.Context, fallback string) string {
	if p, ok := auth.FromContext(ctx); ok {
		if p.System {
			return ""
		}
		return "key:" + p.KeyID
	}
	return "addr:" + fallback
}

// RetryAfterSeconds is d rounded up to whole seconds, at least 1: the
// Retry-After value.
func RetryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

func message(d time.Duration) string {
	return fmt.Sprintf("rate limit exceeded: retry in %ds", RetryAfterSeconds(d))
}

// Deps are what a Limiter uses.
type Deps struct {
	// Counter counts requests: NewMemory for one process, NewRedis for a
	// cluster. Required.
	Counter Counter
	// Logger reports a counter that fails (the request is then let
	// through). Required.
	Logger *slog.Logger
	// InternalTokens are the deployment's internal tokens: a gRPC call that
	// carries a counted mark made with one of them was counted already, at
	// the gateway. Empty: every call with a key is counted.
	InternalTokens []string
}

// Limiter applies a Counter to HTTP requests and gRPC calls.
type Limiter struct {
	counter Counter
	logger  *slog.Logger
	tokens  []string
}

// New returns a limiter over d.Counter.
func New(d Deps) (*Limiter, error) {
	if d.Counter == nil {
		return nil, errors.New("ratelimit: a counter is required (NewMemory for one process, NewRedis for a cluster)")
	}
	if d.Logger == nil {
		return nil, errors.New("ratelimit: a logger is required")
	}
	return &Limiter{counter: d.Counter, logger: d.Logger, tokens: d.InternalTokens}, nil
}

// allow asks the counter. A counter that cannot answer (Redis unreachable)
// lets the request through: the limit protects capacity, and refusing
// every call while Redis is down would take the API down with it.
func (l *Limiter) allow(ctx context.Context, key string) (bool, time.Duration) {
	ok, d, err := l.counter.Take(ctx, key)
	if err != nil {
		l.logger.WarnContext(ctx, "rate limit not checked: counter failed", "err", err)
		return true, 0
	}
	return ok, d
}

// Middleware limits HTTP requests. Put it after auth.Middleware so
// requests are counted against their key.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		key := CallerKey(r.Context(), host)
		if key != "" && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
			if ok, d := l.allow(r.Context(), key); !ok {
				metrics.RateLimited(r.Context(), "http")
				w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds(d)))
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				_ = json.NewEncoder(w).Encode(struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}{int(codes.ResourceExhausted), message(d)})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// check returns the refusal for a call over the limit, and the header
// that says when to retry.
func (l *Limiter) check(ctx context.Context, method string) (metadata.MD, error) {
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return nil, nil // probes must answer however busy a caller is
	}
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			addr = host
		}
	}
	key := CallerKey(ctx, addr)
	if key == "" || l.countedAlready(ctx) {
		return nil, nil
	}
	ok, d := l.allow(ctx, key)
	if ok {
		return nil, nil
	}
	metrics.RateLimited(ctx, "grpc")
	st := status.New(codes.ResourceExhausted, message(d))
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); err == nil {
		st = withInfo
	}
	// The gateway passes the header on as Grpc-Metadata-Retry-After; gRPC
	// clients read RetryInfo.
	return metadata.Pairs("retry-after", strconv.Itoa(RetryAfterSeconds(d))), st.Err()
}

// UnaryServerInterceptor limits unary calls.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if md, err := l.check(ctx, info.FullMethod); err != nil {
			_ = grpc.SetHeader(ctx, md)
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor limits the opening of streams (not their
// messages).
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if md, err := l.check(ss.Context(), info.FullMethod); err != nil {
			_ = ss.SetHeader(md)
			return err
		}
		return handler(srv, ss)
	}
}

// ServerOptions returns both interceptors as server options; pass them
// after auth.ServerOptions so calls are counted against their key.
func (l *Limiter) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(l.StreamServerInterceptor()),
	}
}
