// Package deskgrid is the Go client of deskgrid: isolated Linux desktops for
// computer-use agents.
//
//	c, err := deskgrid.New("127.0.0.1:9090", deskgrid.WithAPIKey(key))
//	s, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{Width: 1280, Height: 800})
//	png, err := s.Screenshot(ctx)
//	err = s.Click(ctx, 100, 200)
//	err = s.Type(ctx, "hello")
//	res, err := s.Exec(ctx, "ls", "-l")
//	err = s.Delete(ctx)
//
// Calls that are safe to repeat are retried when the server is unavailable;
// Create is made safe to repeat with a request id the client picks.
package deskgrid

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// Client talks to one deskgrid deployment.
type Client struct {
	// conn is the connection New made, closed by Close.
	conn *grpc.ClientConn

	session sessionv1.SessionServiceClient
	node    sessionv1.NodeServiceClient
	display displayv1.DisplayServiceClient
	sandbox sandboxv1.SandboxServiceClient
	agent   agentv1.AgentServiceClient
	history historyv1.HistoryServiceClient
	image   imagev1.ImageServiceClient

	// Sessions creates, finds and deletes sessions.
	Sessions *Sessions
	// Runs starts and watches agent runs.
	Runs *Runs
	// Images lists, pulls, imports and deletes images.
	Images *Images
	// Nodes lists, drains and undrains the nodes.
	Nodes *Nodes
	// History searches, imports and deletes recorded history.
	History *History
}

type options struct {
	apiKey  string
	tls     *tls.Config
	retries int
	dial    []grpc.DialOption
}

// Option configures New.
type Option func(*options)

// WithAPIKey sends key as "authorization: Bearer <key>" on every call.
func WithAPIKey(key string) Option { return func(o *options) { o.apiKey = key } }

// WithTLS uses TLS with cfg (nil for the system roots).
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		o.tls = cfg
	}
}

// WithRetries sets how many times a call that may be repeated is tried when
// the server is unavailable (default 4; 1 turns retries off).
func WithRetries(n int) Option { return func(o *options) { o.retries = n } }

// WithDialOptions adds gRPC dial options.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// retryable lists the methods repeated on Unavailable: reads, deletes and
// creates that carry a request id.
var retryable = []string{
	"deskgrid.session.v1.SessionService",
	"deskgrid.session.v1.NodeService/ListNodes",
	"deskgrid.session.v1.NodeService/GetNode",
	"deskgrid.display.v1.DisplayService/Screenshot",
	"deskgrid.display.v1.DisplayService/GetDisplay",
	"deskgrid.sandbox.v1.SandboxService/ReadFile",
	"deskgrid.sandbox.v1.SandboxService/ListFiles",
	"deskgrid.sandbox.v1.SandboxService/StatFile",
	"deskgrid.agent.v1.AgentService/GetRun",
	"deskgrid.agent.v1.AgentService/ListRuns",
	"deskgrid.history.v1.HistoryService",
	"deskgrid.image.v1.ImageService/ListImages",
	"deskgrid.image.v1.ImageService/GetImage",
}

func serviceConfig(retries int) string {
	if retries < 2 {
		return `{}`
	}
	names := ""
	for i, m := range retryable {
		if i > 0 {
			names += ","
		}
		svc, method := m, ""
		for j := range m {
			if m[j] == '/' {
				svc, method = m[:j], m[j+1:]
			}
		}
		if method == "" {
			names += fmt.Sprintf(`{"service":%q}`, svc)
		} else {
			names += fmt.Sprintf(`{"service":%q,"method":%q}`, svc, method)
		}
	}
	return fmt.Sprintf(`{"methodConfig":[{"name":[%s],"retryPolicy":{"maxAttempts":%d,"initialBackoff":"0.1s","maxBackoff":"2s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`, names, retries)
}

// New connects to a deskgrid gRPC address such as "127.0.0.1:9090". It does
// not wait for the server; the first call does.
func New(addr string, opts ...Option) (*Client, error) {
	o := options{retries: 4}
	for _, f := range opts {
		f(&o)
	}
	if o.retries > 5 {
		o.retries = 5 // gRPC's own ceiling
	}
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(serviceConfig(o.retries)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
	}
	conn, err := grpc.NewClient(addr, append(dial, o.dial...)...)
	if err != nil {
		return nil, fmt.Errorf("deskgrid: connect %s: %w", addr, err)
	}
	c := newClient(keyConn{cc: conn, key: o.apiKey})
	c.conn = conn
	return c, nil
}

// NewWithConn makes a client over a connection the caller owns (Close then
// does nothing), such as one that routes each service to its own backend.
// Keys go in per call with WithCallAPIKey.
func NewWithConn(conn grpc.ClientConnInterface) *Client {
	return newClient(keyConn{cc: conn})
}

func newClient(conn grpc.ClientConnInterface) *Client {
	c := &Client{
		session: sessionv1.NewSessionServiceClient(conn),
		node:    sessionv1.NewNodeServiceClient(conn),
		display: displayv1.NewDisplayServiceClient(conn),
		sandbox: sandboxv1.NewSandboxServiceClient(conn),
		agent:   agentv1.NewAgentServiceClient(conn),
		history: historyv1.NewHistoryServiceClient(conn),
		image:   imagev1.NewImageServiceClient(conn),
	}
	c.Sessions = &Sessions{c: c}
	c.Images = &Images{c: c}
	c.Runs = &Runs{c: c}
	c.Nodes = &Nodes{c: c}
	c.History = &History{c: c}
	return c
}

// Close releases the connection New made.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// keyConn adds "authorization: Bearer <key>" to every call: the key of the
// call's context (WithCallAPIKey) or else the client's own; and the
// context's input lease token (WithInputLease) to a request that takes one.
type keyConn struct {
	cc  grpc.ClientConnInterface
	key string
}

func (k keyConn) with(ctx context.Context) context.Context {
	key := k.key
	if v, ok := ctx.Value(callKey{}).(string); ok {
		key = v
	}
	if key == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

func (k keyConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return k.cc.Invoke(k.with(ctx), method, withLease(ctx, args), reply, opts...)
}

func (k keyConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return k.cc.NewStream(k.with(ctx), desc, method, opts...)
}

type callKey struct{}

// WithCallAPIKey makes calls made with the returned context use key instead
// of the client's own, for a client shared by several callers (a proxy or an
// MCP endpoint that serves many tenants).
func WithCallAPIKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, callKey{}, key)
}

// Error is a failed call: the gRPC code and the server's message.
type Error struct {
	Code    codes.Code
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("deskgrid: %s: %s", e.Code, e.Message) }

// Is matches the sentinel errors by code: errors.Is(err, deskgrid.ErrNotFound).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrNotFound           = &Error{Code: codes.NotFound}
	ErrInvalidArgument    = &Error{Code: codes.InvalidArgument}
	ErrFailedPrecondition = &Error{Code: codes.FailedPrecondition}
	ErrResourceExhausted  = &Error{Code: codes.ResourceExhausted}
	ErrUnavailable        = &Error{Code: codes.Unavailable}
	ErrUnauthenticated    = &Error{Code: codes.Unauthenticated}
	ErrPermissionDenied   = &Error{Code: codes.PermissionDenied}
	ErrUnimplemented      = &Error{Code: codes.Unimplemented}
)

// wrap turns a gRPC status into an *Error; context errors pass through.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if st, ok := status.FromError(err); ok {
		return &Error{Code: st.Code(), Message: st.Message()}
	}
	return err
}

// defaultTimeout bounds calls whose context has no deadline, so none hangs.
const defaultTimeout = 2 * time.Minute

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultTimeout)
}
