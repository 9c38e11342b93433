// Package gateway serves deskgrid's public API as REST/JSON through
// grpc-gateway, with health, readiness, metrics and the OpenAPI document, the
// live view of a desktop as RFB over WebSocket, and the web page.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/deskgrid/deskgrid/gateway/internal/openapi"
	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/ratelimit"
	"github.com/deskgrid/deskgrid/services/platform/auth/viewer"
)

// Config configures the gateway.
type Config struct {
	// MaxBodyBytes bounds a request body; larger ones get 413.
	MaxBodyBytes int64
	// ReadyTimeout bounds each backend health check made by /readyz.
	ReadyTimeout time.Duration
	// AllowedOrigins are the browser origins, besides the gateway's own host,
	// that may open a VNC WebSocket: full origins ("https://app.example.com")
	// or host patterns ("*.example.com", path.Match syntax).
	AllowedOrigins []string
	// VNCConnectTimeout bounds the wait for a display's first RFB bytes
	// before the WebSocket upgrade is refused with 504.
	VNCConnectTimeout time.Duration
	// VNCMaxMessageBytes bounds one WebSocket message from a viewer (a
	// clipboard paste is the largest); larger ones close the connection.
	VNCMaxMessageBytes int64
	// SSEHeartbeat is how often an idle event stream sends a comment, so
	// proxies and browsers keep the connection.
	SSEHeartbeat time.Duration
	// SSEWriteTimeout bounds one write to an event-stream client; a client
	// that reads nothing for this long is dropped and resumes later.
	SSEWriteTimeout time.Duration
	// ViewerRecheck is how often a live view checks that its viewer token
	// was not revoked on another gateway replica (a revocation on this one
	// ends the view at once).
	ViewerRecheck time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxBodyBytes:       16 << 20,
		ReadyTimeout:       2 * time.Second,
		VNCConnectTimeout:  10 * time.Second,
		VNCMaxMessageBytes: 1 << 20,
		SSEHeartbeat:       15 * time.Second,
		SSEWriteTimeout:    time.Minute,
		ViewerRecheck:      10 * time.Second,
	}
}

// Backends are the gRPC connections the gateway forwards to.
type Backends struct {
	Session grpc.ClientConnInterface
	// Node serves display and sandbox calls: the one node's connection, or a
	// router that sends each call to the node its session runs on.
	Node grpc.ClientConnInterface
	// Image serves image calls; nil: Node. In a cluster, the session
	// service, which sends each to the node the call names.
	Image   grpc.ClientConnInterface
	Agent   grpc.ClientConnInterface
	History grpc.ClientConnInterface
}

// Deps are what the gateway uses.
type Deps struct {
	Logger   *slog.Logger
	Backends Backends
	// Metrics serves /metrics; nil leaves it out.
	Metrics http.Handler
	// MCP serves the Model Context Protocol endpoint at /mcp; nil leaves it out.
	MCP http.Handler
	// AuthorizeVNC decides whether a request may watch a session's desktop
	// and whether it may only watch (viewOnly forces view-only; a viewer may
	// also ask for it with ?view_only=true). An error refuses the upgrade:
	// 401 when it wraps ErrUnauthenticated, 403 otherwise. Nil allows every
	// request and lets the viewer choose. With Viewer set it applies after
	// the viewer token, and can only refuse or restrict further.
	AuthorizeVNC func(r *http.Request, sessionID string) (viewOnly bool, err error)

	// Verifier authenticates every API route (/v1/*, event streams, /mcp)
	// with "Authorization: Bearer <API key>"; nil turns authentication off.
	// The console's pages, /healthz, /readyz and the API index stay open.
	// It requires Viewer: the live view then takes viewer tokens only.
	Verifier *auth.Verifier
	// Viewer issues viewer tokens (POST /v1/sessions/{id}/viewerToken) and
	// makes the VNC WebSocket accept nothing else; nil: the WebSocket is
	// open (or decided by AuthorizeVNC).
	Viewer *viewer.Issuer
	// NodeCredentials prepares the context of the ConnectVNC call a viewer
	// token opens, for the token's tenant (the internal token acting for
	// it); nil calls the node with the context as it is.
	NodeCredentials func(ctx context.Context, tenant string) context.Context
	// MetricsNeedKey puts /metrics behind an API key (read scope) when
	// Verifier is set; otherwise /metrics is open.
	MetricsNeedKey bool
	// RateLimit limits API requests per key (per client address without
	// one): over the rate, 429 with Retry-After. Nil: no limit.
	RateLimit *ratelimit.Limiter
}

// Gateway is the REST front.
type Gateway struct {
	cfg     Config
	logger  *slog.Logger
	deps    Deps
	handler http.Handler
	web     *web

	// base outlives requests: VNC bridges run on hijacked connections that
	// http.Server.Shutdown does not track, so Close ends them through it.
	base       context.Context
	cancelBase context.CancelFunc
	mu         sync.Mutex
	closed     bool
	bridges    sync.WaitGroup

	viewers *viewers
}

type acceptKey struct{}

// New registers every public service's REST routes.
func New(ctx context.Context, cfg Config, deps Deps) (*Gateway, error) {
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	b := deps.Backends
	if b.Session == nil || b.Node == nil || b.Agent == nil || b.History == nil {
		return nil, errors.New("gateway: every backend connection is required")
	}
	if deps.Verifier != nil && deps.Viewer == nil {
		// Otherwise the live view would be either open to anyone or closed
		// to browsers, which cannot send an API key on a WebSocket.
		return nil, errors.New("gateway: authentication needs a viewer token issuer (Deps.Viewer) for the live view")
	}
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{
			Marshaler: &runtime.JSONPb{
				MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: false},
				UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
			},
		}),
		runtime.WithForwardResponseOption(setImageContentType),
		runtime.WithForwardResponseRewriter(rawImages),
		runtime.WithRoutingErrorHandler(routingError),
	)
	for name, register := range map[string]func() error{
		"session": func() error {
			return sessionv1.RegisterSessionServiceHandlerClient(ctx, mux, sessionv1.NewSessionServiceClient(b.Session))
		},
		"node": func() error {
			return sessionv1.RegisterNodeServiceHandlerClient(ctx, mux, sessionv1.NewNodeServiceClient(b.Session))
		},
		"display": func() error {
			return displayv1.RegisterDisplayServiceHandlerClient(ctx, mux, displayv1.NewDisplayServiceClient(b.Node))
		},
		"sandbox": func() error {
			return sandboxv1.RegisterSandboxServiceHandlerClient(ctx, mux, sandboxv1.NewSandboxServiceClient(b.Node))
		},
		"image": func() error {
			images := b.Image
			if images == nil {
				images = b.Node
			}
			return imagev1.RegisterImageServiceHandlerClient(ctx, mux, imagev1.NewImageServiceClient(images))
		},
		"agent": func() error {
			return agentv1.RegisterAgentServiceHandlerClient(ctx, mux, agentv1.NewAgentServiceClient(b.Agent))
		},
		"history": func() error {
			return historyv1.RegisterHistoryServiceHandlerClient(ctx, mux, historyv1.NewHistoryServiceClient(b.History))
		},
	} {
		if err := register(); err != nil {
			return nil, fmt.Errorf("gateway: register %s: %w", name, err)
		}
	}
	def := DefaultConfig()
	if cfg.VNCConnectTimeout <= 0 {
		cfg.VNCConnectTimeout = def.VNCConnectTimeout
	}
	if cfg.VNCMaxMessageBytes <= 0 {
		cfg.VNCMaxMessageBytes = def.VNCMaxMessageBytes
	}
	if cfg.SSEHeartbeat <= 0 {
		cfg.SSEHeartbeat = def.SSEHeartbeat
	}
	if cfg.SSEWriteTimeout <= 0 {
		cfg.SSEWriteTimeout = def.SSEWriteTimeout
	}
	if cfg.ViewerRecheck <= 0 {
		cfg.ViewerRecheck = def.ViewerRecheck
	}
	g := &Gateway{cfg: cfg, logger: deps.Logger, deps: deps, web: newWeb(), viewers: newViewers()}
	g.base, g.cancelBase = context.WithCancel(context.WithoutCancel(ctx))

	root := http.NewServeMux()
	api := g.sseRoutes(mux, g.limitBody(mux))
	root.Handle("/v1/", g.protect(api))
	root.Handle("GET /v1/sessions/{session_id}/history:export", g.protect(g.exportHistory(mux)))
	// A recording's video (…/recordings/{id}:download); the rest of the
	// recordings' routes go to the API.
	root.Handle("GET /v1/sessions/{session_id}/recordings/{recording}", g.protect(g.downloadRecording(mux, api)))
	root.Handle("POST /v1/sessions/{session_id}/viewerToken", g.protect(http.HandlerFunc(g.issueViewerToken)))
	root.Handle("DELETE /v1/viewerTokens/{token_id}", g.protect(http.HandlerFunc(g.revokeViewerToken)))
	// The WebSocket checks its own credentials: viewer tokens.
	vnc := http.Handler(http.HandlerFunc(g.vnc))
	if deps.RateLimit != nil {
		vnc = deps.RateLimit.Middleware(vnc)
	}
	root.Handle("GET /v1/sessions/{session_id}/vnc", vnc)
	root.HandleFunc("GET /v1", g.index)
	root.HandleFunc("GET /v1/{$}", g.index)
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	root.HandleFunc("GET /readyz", g.ready)
	if deps.MCP != nil {
		root.Handle("/mcp", g.protect(g.limitBody(deps.MCP)))
		root.Handle("/mcp/", g.protect(g.limitBody(deps.MCP)))
	}
	root.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapi.Document)
	})
	if deps.Metrics != nil {
		metrics := deps.Metrics
		if deps.MetricsNeedKey && deps.Verifier != nil {
			metrics = auth.Middleware(deps.Verifier, auth.HTTPOptions{OpenPaths: []string{}, MetricsNeedKey: true})(metrics)
		}
		root.Handle("GET /metrics", metrics)
	}
	root.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if wantsJSONIndex(r) {
			g.index(w, r)
			return
		}
		g.web.page(w, r, "index.html")
	})
	root.HandleFunc("GET /sessions/{session_id}", func(w http.ResponseWriter, r *http.Request) {
		g.web.viewer(w, r)
	})
	// The API reference, rendered in the browser from /openapi.json.
	root.HandleFunc("GET /docs", func(w http.ResponseWriter, r *http.Request) {
		g.web.page(w, r, "docs.html")
	})
	root.Handle("GET /static/", g.web.static())
	root.Handle("GET /novnc/", g.web.novnc())
	root.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"code": 5, "message": "no such path: " + r.URL.Path})
	})
	g.handler = otelhttp.NewHandler(root, "gateway", otelhttp.WithFilter(func(r *http.Request) bool {
		return !strings.HasPrefix(r.URL.Path, "/healthz") && !strings.HasPrefix(r.URL.Path, "/metrics")
	}))
	return g, nil
}

// Handler is the gateway's HTTP handler.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Close ends every live VNC connection and waits for them; call it after the
// HTTP server's Shutdown, which does not see upgraded connections.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancelBase()
	done := make(chan struct{})
	go func() {
		g.bridges.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gateway: VNC connections still closing: %w", ctx.Err())
	}
}

// index is the JSON map of the API, for clients that ask for JSON at / and
// for everyone at /v1.
func (g *Gateway) index(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"service": "deskgrid",
		// Whether API calls need "Authorization: Bearer <API key>", and the
		// live view a viewer token: the console asks for a key when so.
		"auth":          g.deps.Verifier != nil,
		"viewer_tokens": g.deps.Viewer != nil,
		"viewer_token":  "POST /v1/sessions/{session_id}/viewerToken {\"mode\":\"view\"|\"control\",\"ttl_seconds\":N}",
		"api":           "/v1/sessions",
		"vnc":           "/v1/sessions/{session_id}/vnc",
		"events":        "/v1/runs/{run_id}/events and /v1/sessions/{session_id}:watch (server-sent events with Accept: text/event-stream)",
		"openapi":       "/openapi.json",
		"docs":          "/docs",
		"health":        "/healthz",
		"ready":         "/readyz",
		"web":           "/",
	})
}

// wantsJSONIndex keeps / a JSON document for API clients (curl -H 'Accept:
// application/json') while browsers, which ask for text/html, get the page.
func wantsJSONIndex(r *http.Request) bool {
	a := r.Header.Get("Accept")
	return strings.Contains(a, "application/json") && !strings.Contains(a, "text/html")
}

func (g *Gateway) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > g.cfg.MaxBodyBytes {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{
				"code":    8,
				"message": fmt.Sprintf("request body of %d bytes is over the limit of %d", r.ContentLength, g.cfg.MaxBodyBytes),
			})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes)
		ctx, cancel := context.WithCancel(context.WithValue(r.Context(), acceptKey{}, r.Header.Get("Accept")))
		defer cancel()
		// A streamed reply (newline-delimited JSON) would otherwise hold the
		// HTTP server's Shutdown until its deadline.
		defer context.AfterFunc(g.base, cancel)()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// ready answers 200 when every backend's health service says SERVING.
func (g *Gateway) ready(w http.ResponseWriter, r *http.Request) {
	b := g.deps.Backends
	conns := map[string]grpc.ClientConnInterface{"session": b.Session, "node": b.Node, "agent": b.Agent, "history": b.History}
	report := map[string]string{}
	ok := true
	for name, conn := range conns {
		if _, direct := conn.(*grpc.ClientConn); !direct {
			// A router has no single server to ask; its nodes report through
			// the node registry.
			report[name] = "routed"
			continue
		}
		ctx, cancel := context.WithTimeout(r.Context(), g.cfg.ReadyTimeout)
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		switch {
		case err != nil:
			report[name] = "unreachable"
			ok = false
		case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
			report[name] = strings.ToLower(resp.GetStatus().String())
			ok = false
		default:
			report[name] = "serving"
		}
	}
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]any{"ready": ok, "backends": report})
}

// wantsJSON tells whether the client asked for JSON rather than raw bytes.
func wantsJSON(ctx context.Context) bool {
	a, _ := ctx.Value(acceptKey{}).(string)
	return strings.Contains(a, "application/json")
}

// setImageContentType gives a screenshot response its image type, so REST
// clients get the picture itself (curl ... > shot.png) unless they ask for JSON.
func setImageContentType(ctx context.Context, w http.ResponseWriter, m proto.Message) error {
	if s, ok := m.(*displayv1.ScreenshotResponse); ok && !wantsJSON(ctx) {
		w.Header().Set("Content-Type", s.GetContentType())
		w.Header().Set("X-Deskgrid-Width", fmt.Sprint(s.GetWidth()))
		w.Header().Set("X-Deskgrid-Height", fmt.Sprint(s.GetHeight()))
	}
	return nil
}

func rawImages(ctx context.Context, m proto.Message) (any, error) {
	if s, ok := m.(*displayv1.ScreenshotResponse); ok && !wantsJSON(ctx) {
		return &httpbody.HttpBody{ContentType: s.GetContentType(), Data: s.GetData()}, nil
	}
	return m, nil
}

func routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, status int) {
	switch status {
	case http.StatusMethodNotAllowed:
		writeJSON(w, status, map[string]any{"code": 12, "message": r.Method + " is not allowed on " + r.URL.Path})
	case http.StatusNotFound:
		writeJSON(w, status, map[string]any{"code": 5, "message": "no such path: " + r.URL.Path})
	default:
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, status)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
