// Package noderoute sends a session's display and sandbox calls to the node
// the session runs on. Router is a grpc.ClientConnInterface: generated
// clients (displayv1.NewDisplayServiceClient(router)) work unchanged, and
// each call goes to the node the session map names for the request's
// session_id.
//
// Addresses are cached per session for a short TTL, dropped when a session
// event arrives (Forget, or Subscribe to NATS), and dropped when a call to
// the cached node fails with Unavailable or NotFound, so a moved or lost
// session is looked up afresh on the next call.
package noderoute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
)

// Resolver returns the gRPC address of the node a session runs on. An error
// wrapping ErrNotPlaced means the session runs nowhere.
type Resolver interface {
	Resolve(ctx context.Context, sessionID string) (string, error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context, sessionID string) (string, error)

// Resolve implements Resolver.
func (f ResolverFunc) Resolve(ctx context.Context, sessionID string) (string, error) {
	return f(ctx, sessionID)
}

// ErrNotPlaced: the session is not on any node (never placed, ended or lost).
var ErrNotPlaced = errors.New("session is not running on any node")

// Options configure a Router.
type Options struct {
	Resolver Resolver
	// TTL bounds how long a cached address is used without events (5 s
	// when zero).
	TTL time.Duration
	// CallTimeout is the deadline given to unary calls that come without
	// one (30 s when zero), so a call never hangs on a dead node.
	CallTimeout time.Duration
	// Dial opens a connection to a node; nil dials insecure gRPC with
	// DialOptions.
	Dial        func(addr string) (*grpc.ClientConn, error)
	DialOptions []grpc.DialOption
	Logger      *slog.Logger
	// Health answers grpc.health.v1.Health/Check, which names no session,
	// on the router itself: SERVING when it returns nil (such as a ping of
	// the session map's store). Nil always answers SERVING.
	Health func(ctx context.Context) error
}

// Router routes calls by session. It is safe for concurrent use.
type Router struct {
	opts Options
	log  *slog.Logger
	now  func() time.Time

	mu     sync.Mutex
	cache  map[string]entry
	conns  map[string]*grpc.ClientConn
	closed bool
}

type entry struct {
	addr    string
	expires time.Time
}

var _ grpc.ClientConnInterface = (*Router)(nil)

// New returns a router.
func New(opts Options) (*Router, error) {
	if opts.Resolver == nil {
		return nil, errors.New("noderoute: a Resolver is required")
	}
	if opts.TTL <= 0 {
		opts.TTL = 5 * time.Second
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 30 * time.Second
	}
	if opts.Dial == nil {
		dopts := append(append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, grpcserver.ClientOptions()...), opts.DialOptions...)
		opts.Dial = func(addr string) (*grpc.ClientConn, error) { return grpc.NewClient(addr, dopts...) }
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Router{opts: opts, log: log, now: time.Now, cache: map[string]entry{}, conns: map[string]*grpc.ClientConn{}}, nil
}

type sessionMessage interface{ GetSessionId() string }

// Invoke implements grpc.ClientConnInterface.
func (r *Router) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if method == healthCheckMethod {
		return r.health(ctx, reply)
	}
	id, err := sessionOf(method, args)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.CallTimeout)
		defer cancel()
	}
	cc, err := r.conn(ctx, id)
	if err != nil {
		return err
	}
	err = cc.Invoke(ctx, method, args, reply, opts...)
	r.check(id, err)
	return err
}

// NewStream implements grpc.ClientConnInterface. The session is known only
// from the first message, so the stream returned opens the real one on the
// first SendMsg; a server stream's generated client sends it at once.
func (r *Router) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return &lazyStream{r: r, ctx: ctx, desc: desc, method: method, opts: opts, ready: make(chan struct{})}, nil
}

// Forget drops the cached node of a session.
func (r *Router) Forget(sessionID string) {
	r.mu.Lock()
	delete(r.cache, sessionID)
	r.mu.Unlock()
}

// Subscribe forgets a session's cached node whenever an event about the
// session is published on subjects of the form <prefix>.<session>.<type>
// (such as "deskgrid.events.>"), so moves and ends are seen at once.
func (r *Router) Subscribe(nc *nats.Conn, subjectPrefix string) (*nats.Subscription, error) {
	return nc.Subscribe(subjectPrefix+".>", func(m *nats.Msg) {
		rest := strings.TrimPrefix(m.Subject, subjectPrefix+".")
		if i := strings.IndexByte(rest, '.'); i > 0 {
			r.Forget(rest[:i])
		}
	})
}

// Close closes the node connections.
func (r *Router) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	var errs []error
	for addr, c := range r.conns {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		}
		delete(r.conns, addr)
	}
	return errors.Join(errs...)
}

const healthCheckMethod = "/grpc.health.v1.Health/Check"

// health answers a health check for the whole set of nodes: callers such as
// a gateway's readiness check cannot name one.
func (r *Router) health(ctx context.Context, reply any) error {
	resp, ok := reply.(*healthpb.HealthCheckResponse)
	if !ok {
		return status.Error(codes.Internal, "health check: unexpected reply type")
	}
	resp.Status = healthpb.HealthCheckResponse_SERVING
	if r.opts.Health != nil {
		if err := r.opts.Health(ctx); err != nil {
			resp.Status = healthpb.HealthCheckResponse_NOT_SERVING
		}
	}
	return nil
}

func sessionOf(method string, msg any) (string, error) {
	m, ok := msg.(sessionMessage)
	if !ok || m.GetSessionId() == "" {
		return "", status.Errorf(codes.InvalidArgument, "%s: session_id is required to reach the session's node", method)
	}
	return m.GetSessionId(), nil
}

// conn returns the connection to the node of sessionID.
func (r *Router) conn(ctx context.Context, sessionID string) (*grpc.ClientConn, error) {
	r.mu.Lock()
	e, ok := r.cache[sessionID]
	r.mu.Unlock()
	addr := e.addr
	if !ok || r.now().After(e.expires) {
		var err error
		addr, err = r.opts.Resolver.Resolve(ctx, sessionID)
		if errors.Is(err, ErrNotPlaced) {
			return nil, status.Errorf(codes.NotFound, "session %s is not running on any node", sessionID)
		}
		if err != nil {
			if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
				return nil, err
			}
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return nil, status.Errorf(codes.Unavailable, "look up the node of session %s: %v", sessionID, err)
		}
		r.mu.Lock()
		r.cache[sessionID] = entry{addr: addr, expires: r.now().Add(r.opts.TTL)}
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, status.Error(codes.Unavailable, "node router is closed")
	}
	if c, ok := r.conns[addr]; ok {
		return c, nil
	}
	c, err := r.opts.Dial(addr)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "dial node %s: %v", addr, err)
	}
	r.conns[addr] = c
	return c, nil
}

// check drops a session's cached node when the node's answer says it may
// be the wrong one.
func (r *Router) check(sessionID string, err error) {
	switch status.Code(err) {
	case codes.Unavailable, codes.NotFound:
		r.Forget(sessionID)
	}
}

// lazyStream opens the real stream when the first message, which names the
// session, is sent.
type lazyStream struct {
	r      *Router
	ctx    context.Context
	desc   *grpc.StreamDesc
	method string
	opts   []grpc.CallOption

	once  sync.Once
	ready chan struct{} // closed once the real stream is open or failed
	cs    grpc.ClientStream
	id    string
	err   error
}

func (s *lazyStream) open(msg any) error {
	s.once.Do(func() {
		defer close(s.ready)
		s.id, s.err = sessionOf(s.method, msg)
		if s.err != nil {
			return
		}
		var cc *grpc.ClientConn
		cc, s.err = s.r.conn(s.ctx, s.id)
		if s.err != nil {
			return
		}
		s.cs, s.err = cc.NewStream(s.ctx, s.desc, s.method, s.opts...)
		s.r.check(s.id, s.err)
	})
	return s.err
}

// wait returns the real stream once it is open; before the first SendMsg
// there is none, and the calls that need one wait for it or the context.
func (s *lazyStream) wait() (grpc.ClientStream, error) {
	select {
	case <-s.ready:
		return s.cs, s.err
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
}

func (s *lazyStream) SendMsg(m any) error {
	if err := s.open(m); err != nil {
		return err
	}
	return s.cs.SendMsg(m)
}

func (s *lazyStream) RecvMsg(m any) error {
	cs, err := s.wait()
	if err != nil {
		return err
	}
	err = cs.RecvMsg(m)
	if err != nil {
		s.r.check(s.id, err)
	}
	return err
}

func (s *lazyStream) CloseSend() error {
	// Closing before anything was sent leaves no session to route to; the
	// receive that follows reports it.
	s.once.Do(func() {
		s.err = status.Errorf(codes.InvalidArgument, "%s: the stream was closed before its first message named a session", s.method)
		close(s.ready)
	})
	<-s.ready
	if s.cs == nil {
		return nil
	}
	return s.cs.CloseSend()
}

func (s *lazyStream) Header() (metadata.MD, error) {
	cs, err := s.wait()
	if err != nil {
		return nil, err
	}
	return cs.Header()
}

func (s *lazyStream) Trailer() metadata.MD {
	select {
	case <-s.ready:
		if s.cs != nil {
			return s.cs.Trailer()
		}
	default:
	}
	return nil
}

func (s *lazyStream) Context() context.Context {
	select {
	case <-s.ready:
		if s.cs != nil {
			return s.cs.Context()
		}
	default:
	}
	return s.ctx
}
