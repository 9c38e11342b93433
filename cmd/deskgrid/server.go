package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/deskgrid/deskgrid/services/platform/activity"
	"github.com/deskgrid/deskgrid/services/platform/config"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/platform/natsembed"
	"github.com/deskgrid/deskgrid/services/platform/telemetry"
	"github.com/deskgrid/deskgrid/services/platform/trail"
	"github.com/deskgrid/deskgrid/services/sandbox/imagebuild"
	"github.com/deskgrid/deskgrid/services/session"
)

// serverConfig is every setting of the server roles. Flags and DESKGRID_*
// variables fill it; each role reads what it needs.
type serverConfig struct {
	HTTPAddr   string
	GRPCAddr   string
	DataDir    string
	RuntimeDir string

	NATSURL     string
	PostgresURL string

	// Cluster mode: with RedisURL, nodes register and heartbeat there and
	// the session service places on them.
	RedisURL           string
	RedisPrefix        string
	NodeLabels         string
	NodeCPUMillis      int64
	NodeMemoryBytes    int64
	HeartbeatInterval  time.Duration
	HeartbeatTTL       time.Duration
	PlacementK         int
	TenantAntiAffinity bool

	NodeID          string
	NodeAddr        string
	NodeMaxSessions int
	WarmDisplays    int
	WarmDesktops    int
	WarmImages      string
	FirstDisplay    int
	WindowManager   string
	WorkspaceRoots  string
	DefaultImage    string
	DefaultImageDir string

	SessionAddr string
	AgentAddr   string
	HistoryAddr string

	TenantMaxSessions    int64
	TenantMaxCPUMillis   int64
	TenantMaxMemoryBytes int64

	DefaultTTL         time.Duration
	MaxTTL             time.Duration
	DefaultIdleTimeout time.Duration
	CreateTimeout      time.Duration
	ReapInterval       time.Duration
	ActivityInterval   time.Duration

	Auth           bool
	Insecure       bool
	AuthCacheTTL   time.Duration
	InternalToken  string
	ViewerKeys     string
	MetricsNeedKey bool
	MetricsAddr    string
	// MetricsTenantUsage adds per-tenant series (sessions, CPU asked, tokens).
	MetricsTenantUsage bool
	RateLimit          float64

	SecretKey        string
	AnthropicAPIKey  string
	AnthropicBaseURL string
	OpenAIAPIKey     string
	OpenAIBaseURL    string
	GeminiAPIKey     string
	GeminiBaseURL    string

	LogFormat    string
	LogLevel     string
	OTLPEndpoint string

	ShutdownTimeout time.Duration

	limitsConfig
}

func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/deskgrid"
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".local", "share", "deskgrid")
	}
	return filepath.Join(os.TempDir(), "deskgrid-data")
}

func defaultRuntimeDir() string {
	if os.Geteuid() == 0 {
		return "/run/deskgrid"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "deskgrid")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("deskgrid-%d", os.Geteuid()))
}

func serverFlags(name string, stderr io.Writer) (*flag.FlagSet, *serverConfig) {
	c := &serverConfig{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage of deskgrid %s:\n\nEvery flag can also be set in the environment: -http-addr is DESKGRID_HTTP_ADDR,\nand so on; flags win. Give secrets only that way.\n\n", name)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:8080", "REST gateway listen address")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", "127.0.0.1:9090", "gRPC listen address")
	fs.StringVar(&c.DataDir, "data-dir", defaultDataDir(), "where databases, event store and sandbox layers live")
	fs.StringVar(&c.RuntimeDir, "runtime-dir", defaultRuntimeDir(), "where X authority files and other per-boot state live")
	fs.StringVar(&c.NATSURL, "nats-url", "", "NATS server URL; empty runs an embedded server (up only)")
	fs.StringVar(&c.PostgresURL, "postgres-url", "", "PostgreSQL URL for session records and history; empty uses SQLite in the data dir")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL of the cluster registry (redis://host:6379/0); empty runs without a cluster (serve node and serve session)")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", "deskgrid:", "prefix of every Redis key of this deployment")
	fs.StringVar(&c.NodeID, "node-id", "local", "this node's id")
	fs.StringVar(&c.NodeAddr, "node-addr", "127.0.0.1:9090", "gRPC address of the node (display and sandbox); for serve node with -redis-url, the address other machines reach it at; up uses its own -grpc-addr")
	fs.StringVar(&c.NodeLabels, "node-labels", "", "comma-separated key=value labels sessions' node selectors match (serve node)")
	fs.Int64Var(&c.NodeCPUMillis, "node-cpu-millis", 0, "CPU this node offers sessions, in thousandths of a core; 0 does not limit (serve node)")
	fs.Int64Var(&c.NodeMemoryBytes, "node-memory-bytes", 0, "memory this node offers sessions, in bytes; 0 does not limit (serve node)")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", time.Second, "how often a node renews its heartbeat")
	fs.DurationVar(&c.HeartbeatTTL, "heartbeat-ttl", 3*time.Second, "how long a silent node counts as alive; its sessions are LOST after it")
	fs.IntVar(&c.PlacementK, "placement-k", 3, "nodes sampled and scored per placement (best of K); 0 scores all")
	fs.BoolVar(&c.TenantAntiAffinity, "tenant-anti-affinity", false, "spread each tenant's sessions over nodes")
	fs.IntVar(&c.NodeMaxSessions, "node-max-sessions", 64, "sessions one node holds at once")
	fs.IntVar(&c.WarmDisplays, "warm-displays", 1, "X servers kept started at the default size, so creating a session does not wait for one")
	fs.IntVar(&c.WarmDesktops, "warm-desktops", 1, "sessions of -default-image kept fully started (container, window manager and panel drawn) at the default display size, so creating such a session is instant; each holds one idle desktop's memory")
	fs.StringVar(&c.WarmImages, "warm-images", "", "more images whose desktops are kept started like -warm-desktops, as comma-separated ref=count pairs (my-team/qa-desktop:v3=2); a create of that image (as its tenant resolves it) at the default size is given one")
	fs.IntVar(&c.FirstDisplay, "first-display", 100, "lowest X display number the node uses; give nodes sharing one machine's /tmp disjoint ranges")
	fs.StringVar(&c.WindowManager, "window-manager", "", "window manager started inside every session's sandbox on its display, such as openbox; empty runs bare X")
	// up is one node that imports its default image; in a cluster the
	// session role cannot see the nodes' stores, so the default is asked for.
	defImage := ""
	if name == "up" {
		defImage = defaultImage
	}
	fs.StringVar(&c.DefaultImage, "default-image", defImage, "image of a session that names none (and no workspace); \"\" runs such sessions on the node's own programs (up: "+defaultImage+"; serve: none, set it on the session role and give the nodes the image)")
	fs.StringVar(&c.DefaultImageDir, "default-image-dir", imagebuild.DefaultCacheDir+"/desktop", "OCI layout imported as -default-image at start when the node's store lacks it (scripts/setup builds the desktop image there)")
	fs.StringVar(&c.WorkspaceRoots, "workspace-roots", "", "comma-separated folders whose subfolders sessions may use as workspaces")
	fs.StringVar(&c.SessionAddr, "session-addr", "127.0.0.1:9090", "gRPC address of the session service (gateway); up uses its own -grpc-addr")
	fs.StringVar(&c.AgentAddr, "agent-addr", "127.0.0.1:9090", "gRPC address of the agent service (gateway); up uses its own -grpc-addr")
	fs.StringVar(&c.HistoryAddr, "history-addr", "127.0.0.1:9090", "gRPC address of the history service (gateway); up uses its own -grpc-addr")
	fs.Int64Var(&c.TenantMaxSessions, "tenant-max-sessions", session.DefaultTenantMaxSessions, "unfinished sessions one tenant may hold (0: no limit)")
	fs.Int64Var(&c.TenantMaxCPUMillis, "tenant-max-cpu-millis", 0, "CPU one tenant's sessions may ask for in all, thousandths of a core (0: no limit)")
	fs.Int64Var(&c.TenantMaxMemoryBytes, "tenant-max-memory-bytes", 0, "memory one tenant's sessions may ask for in all (0: no limit)")
	fs.DurationVar(&c.DefaultTTL, "default-ttl", time.Hour, "session lifetime when the request gives none")
	fs.DurationVar(&c.MaxTTL, "max-ttl", 24*time.Hour, "longest session lifetime a request may ask for")
	fs.DurationVar(&c.DefaultIdleTimeout, "default-idle-timeout", 15*time.Minute, "idle time after which a session stops, when the request gives none")
	fs.DurationVar(&c.CreateTimeout, "create-timeout", 30*time.Second, "bound on starting one session")
	fs.DurationVar(&c.ReapInterval, "reap-interval", 5*time.Second, "how often the session service looks for sessions past their TTL or idle timeout")
	fs.DurationVar(&c.ActivityInterval, "activity-interval", activity.DefaultInterval, "how often nodes and the agent report which sessions were used (the same on every role)")
	// On by default for the all-in-one deskgrid; a cluster turns it on for
	// every role together, with -internal-token and -viewer-keys.
	fs.BoolVar(&c.Auth, "auth", name == "up", "require API keys on every call but health checks (deskgrid up makes and prints the first one)")
	fs.BoolVar(&c.Insecure, "insecure", false, "let a serve role without -auth listen on an address other machines reach (a trusted test network only)")
	fs.DurationVar(&c.AuthCacheTTL, "auth-cache-ttl", 10*time.Second, "how long a verified key is trusted before the store is asked again (revocation takes this long)")
	fs.StringVar(&c.ViewerKeys, "viewer-keys", "", "keys signing live-view tokens, id:base64 of 32+ bytes, comma-separated, newest first; deskgrid up makes one")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", "where a role without the gateway serves /metrics for Prometheus, such as 0.0.0.0:9464; empty serves none (the gateway and up serve /metrics on -http-addr)")
	fs.BoolVar(&c.MetricsTenantUsage, "metrics-tenant-usage", false, "add per-tenant usage metrics (sessions, CPU asked, tokens), labelled by tenant id")
	fs.BoolVar(&c.MetricsNeedKey, "metrics-need-key", false, "with -auth, /metrics needs an API key too")
	fs.Float64Var(&c.RateLimit, "rate-limit", 50, "with -auth, requests per second one API key may make through the gateway (0: no limit)")
	fs.StringVar(&c.InternalToken, "internal-token", "", "token services use to call each other with -auth; the same on every role (deskgrid up makes one)")
	fs.StringVar(&c.SecretKey, "secret-key", "", "key sealing secrets at rest: base64 of 32 bytes, or id:key,id:key (current first) to rotate; empty: a key kept in the data dir")
	fs.StringVar(&c.AnthropicAPIKey, "anthropic-api-key", os.Getenv("ANTHROPIC_API_KEY"), "Anthropic key for runs that bring none")
	fs.StringVar(&c.AnthropicBaseURL, "anthropic-base-url", "", "Anthropic API base URL (proxies, compatible gateways)")
	fs.StringVar(&c.OpenAIAPIKey, "openai-api-key", os.Getenv("OPENAI_API_KEY"), "OpenAI key for runs that bring none")
	fs.StringVar(&c.OpenAIBaseURL, "openai-base-url", "", "OpenAI API base URL")
	fs.StringVar(&c.GeminiAPIKey, "gemini-api-key", os.Getenv("GEMINI_API_KEY"), "Gemini key for runs that bring none")
	fs.StringVar(&c.GeminiBaseURL, "gemini-base-url", "", "Gemini API base URL")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", "", "OTLP/gRPC collector host:port for traces; empty disables")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "bound on draining at shutdown")
	limitFlags(fs, &c.limitsConfig)
	return fs, c
}

// closers stops what an assembly started, in reverse order.
type closers struct {
	logger *slog.Logger
	list   []closer
}

type closer struct {
	name string
	fn   func(context.Context) error
}

func (c *closers) add(name string, fn func(context.Context) error) {
	c.list = append(c.list, closer{name, fn})
}

func (c *closers) closeAll(ctx context.Context) error {
	var errs []error
	for i := len(c.list) - 1; i >= 0; i-- {
		cl := c.list[i]
		if err := cl.fn(ctx); err != nil {
			c.logger.Error("shutdown", "component", cl.name, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", cl.name, err))
		}
	}
	return errors.Join(errs...)
}

// setup is what every role starts with.
type setup struct {
	role    string
	cfg     *serverConfig
	tel     *telemetry.Telemetry
	logger  *slog.Logger
	closers *closers
	auth    *authState
}

func newSetup(ctx context.Context, name string, cfg *serverConfig, stderr io.Writer) (*setup, error) {
	tel, err := telemetry.Setup(ctx, telemetry.Options{
		ServiceName:  "deskgrid-" + name,
		LogFormat:    cfg.LogFormat,
		LogLevel:     cfg.LogLevel,
		LogOutput:    stderr,
		OTLPEndpoint: cfg.OTLPEndpoint,
		OTLPInsecure: true,
	})
	if err != nil {
		return nil, err
	}
	s := &setup{role: name, cfg: cfg, tel: tel, logger: tel.Logger, closers: &closers{logger: tel.Logger}}
	s.closers.add("telemetry", tel.Shutdown)
	return s, nil
}

// shutdown runs the closers with the configured bound.
func (s *setup) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	return s.closers.closeAll(ctx)
}

// natsConn connects to cfg.NATSURL, or starts an embedded server when it is
// empty and embedded is allowed, and makes sure the event stream exists.
func (s *setup) natsConn(ctx context.Context, embedded bool) (*nats.Conn, jetstream.JetStream, error) {
	url := s.cfg.NATSURL
	if url == "" {
		if !embedded {
			return nil, nil, errors.New("-nats-url is required for this role")
		}
		srv, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: filepath.Join(s.cfg.DataDir, "nats")})
		if err != nil {
			return nil, nil, err
		}
		s.closers.add("embedded nats", func(context.Context) error { srv.Close(); return nil })
		url = srv.URL()
	}
	opts := append([]nats.Option{nats.Name("deskgrid"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(false)},
		metrics.NATSConnectionOptions(s.logger)...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	s.closers.add("nats connection", func(context.Context) error { return nc.Drain() })
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig(1, 7*24*time.Hour)); err != nil {
		return nil, nil, err
	}
	return nc, js, nil
}

// grpcServer listens at once, so a port conflict is reported before any
// service is built; serveGRPC starts serving once services are registered.
//
// With rec, the calls made on the display and sandbox served here are
// recorded (after authentication, which names the caller); with act, they
// count as uses of their sessions.
func (s *setup) grpcServer(ctx context.Context, rec *trail.Recorder, act *activity.Tracker) (*grpcserver.Server, net.Listener, error) {
	opts, err := s.serverOptions(ctx)
	if err != nil {
		return nil, nil, err
	}
	if rec != nil {
		opts = append(opts, rec.ServerOptions()...)
	}
	if act != nil {
		opts = append(opts, act.ServerOptions()...)
	}
	lis, err := net.Listen("tcp", s.cfg.GRPCAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("gRPC listen: %w", err)
	}
	srv := grpcserver.New(grpcserver.Options{Logger: s.logger, ServerOptions: opts})
	return srv, lis, nil
}

func dial(addr string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts := append(append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcserver.MaxMessageBytes), grpc.MaxCallSendMsgSize(grpcserver.MaxMessageBytes)),
		// An address naming several replicas (a DNS name with an address
		// per replica) spreads calls over all of them and skips a dead one.
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
	}, grpcserver.ClientOptions()...), telemetryDialOptions()...)
	opts = append(opts, extra...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}

// trail records every call made on this process's displays and sandboxes
// as an event, for the history.
func (s *setup) trail(js jetstream.JetStream) (*trail.Recorder, error) {
	r, err := trail.New(trail.DefaultConfig(), trail.Deps{
		Publisher: events.NewPublisher(js),
		Logger:    s.logger.With("component", "trail"),
	})
	if err != nil {
		return nil, err
	}
	// Closed after the gRPC server drains (its closer comes later) and
	// before the NATS connection (whose closer came earlier).
	s.closers.add("trail", r.Close)
	return r, nil
}

// activityTracker reports which sessions this process's calls and runs
// use, for the session service's idle reaper.
func (s *setup) activityTracker(nc *nats.Conn) (*activity.Tracker, error) {
	t, err := activity.NewTracker(activity.TrackerConfig{Reporter: s.role + "@" + s.cfg.NodeID, Interval: s.cfg.ActivityInterval},
		activity.TrackerDeps{NATS: nc, Logger: s.logger.With("component", "activity")})
	if err != nil {
		return nil, err
	}
	// Closed after the gRPC server drains, before the NATS connection.
	s.closers.add("activity tracker", t.Close)
	return t, nil
}

// parseServerFlags parses a role's flags.
func parseServerFlags(name string, args []string, stderr io.Writer) (*serverConfig, []string, error) {
	fs, cfg := serverFlags(name, stderr)
	if err := config.Parse(fs, args, nil); err != nil {
		return nil, nil, err
	}
	warnSecretFlags(stderr, fs, args)
	if _, err := warmImages(cfg.WarmDesktops, cfg.DefaultImage, cfg.WarmImages); err != nil {
		return nil, nil, err
	}
	return cfg, fs.Args(), nil
}

// serveGRPC serves srv on lis and marks it ready. Its closer drains calls
// before the services registered earlier are closed.
func (s *setup) serveGRPC(srv *grpcserver.Server, lis net.Listener) {
	go func() {
		if err := srv.Serve(lis); err != nil {
			s.logger.Error("gRPC server", "err", err)
		}
	}()
	s.closers.add("gRPC server", func(ctx context.Context) error { srv.Stop(ctx); return nil })
	srv.SetServing("")
}

// checkExposure refuses a serve role that would answer anyone on the
// network without authentication: without -auth it may only listen on a
// loopback address, unless -insecure says so on purpose.
func checkExposure(role string, cfg *serverConfig) error {
	if cfg.Auth || cfg.Insecure {
		return nil
	}
	addr, flagName := cfg.GRPCAddr, "-grpc-addr"
	if role == "gateway" {
		addr, flagName = cfg.HTTPAddr, "-http-addr"
	}
	if loopback(addr) {
		return nil
	}
	return usageError("serve %s: %s %s is reachable from other machines and -auth is off: every call would be let through. "+
		"Set -auth with -internal-token and -viewer-keys (DESKGRID_AUTH, DESKGRID_INTERNAL_TOKEN, DESKGRID_VIEWER_KEYS), "+
		"or -insecure on a trusted test network", role, flagName, addr)
}

// loopback reports whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
