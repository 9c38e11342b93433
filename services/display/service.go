// Package display runs one private X server per session and serves its
// screenshots and input over gRPC (deskgrid.display.v1.DisplayService).
package display

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/capture"
	"github.com/deskgrid/deskgrid/services/display/resize"
	"github.com/deskgrid/deskgrid/services/display/selection"
	"github.com/deskgrid/deskgrid/services/display/windows"
	"github.com/deskgrid/deskgrid/services/display/xauthority"
	"github.com/deskgrid/deskgrid/services/display/xconn"
	"github.com/deskgrid/deskgrid/services/display/xinput"
	"github.com/deskgrid/deskgrid/services/display/xserver"
	"github.com/deskgrid/deskgrid/services/platform/auth"
)

// Config configures the display service.
type Config struct {
	// RuntimeDir holds displays/<session_id>/ with each display's Xauthority
	// file, meta record and server log.
	RuntimeDir string
	// XvfbPath is the X server binary: Xtigervnc (an Xvfb with a VNC server
	// built in, which ConnectVNC needs) or Xvfb (no live view).
	XvfbPath string
	// FirstDisplay is the lowest X display number used; numbers below it are
	// left to the machine's own X servers.
	FirstDisplay int
	// MaxDisplays is how many display numbers, and so displays, this node
	// runs at most.
	MaxDisplays int
	// WarmDisplays is how many X servers of the default size (depth 24, no
	// DPI) are kept started ahead of demand; a CreateDisplay that asks for
	// exactly that takes one instead of waiting for a server to start.
	WarmDisplays int
	// DefaultWidth, DefaultHeight apply when a request leaves them 0.
	DefaultWidth  int
	DefaultHeight int
	// StartTimeout bounds an X server's start.
	StartTimeout time.Duration
	// StopTimeout is the grace between SIGTERM and SIGKILL.
	StopTimeout time.Duration
	// GLX keeps the X server's OpenGL extension (and its memory); off by default.
	GLX bool
	// MaxWait bounds a single wait action.
	MaxWait time.Duration
	// Settle is how a screenshot after input waits for the input's effect
	// when the request does not say: the first change (bounded by
	// SettleChange), then quiet for SettleQuiet (stretched up to
	// SettleMaxQuiet when the screen draws frames further apart), all
	// within SettleTimeout. Effects that arrive late (a page load, a menu,
	// an application's reply) are in the screenshot.
	SettleChange   time.Duration
	SettleQuiet    time.Duration
	SettleMaxQuiet time.Duration
	SettleTimeout  time.Duration
}

// DefaultConfig returns the configuration deskgrid runs with by default.
func DefaultConfig() Config {
	return Config{
		RuntimeDir:     "/run/deskgrid",
		XvfbPath:       "Xtigervnc",
		FirstDisplay:   100,
		MaxDisplays:    1000,
		WarmDisplays:   1,
		DefaultWidth:   1280,
		DefaultHeight:  800,
		StartTimeout:   10 * time.Second,
		StopTimeout:    2 * time.Second,
		MaxWait:        30 * time.Second,
		SettleChange:   time.Second,
		SettleQuiet:    40 * time.Millisecond,
		SettleMaxQuiet: 500 * time.Millisecond,
		SettleTimeout:  3 * time.Second,
	}
}

// Deps are the service's collaborators.
type Deps struct {
	Logger *slog.Logger
	// Tenancy says who a call acts for (auth.CallerOf with auth on, nil
	// with auth off). The tenant of CreateDisplay owns the display; a
	// call for another tenant, or an anonymous one, finds no such display.
	Tenancy auth.Tenancy
}

// Service implements displayv1.DisplayServiceServer.
type Service struct {
	displayv1.UnimplementedDisplayServiceServer

	cfg     Config
	log     *slog.Logger
	encoder *capture.Encoder
	tenancy auth.Tenancy

	mu       sync.Mutex
	closed   bool
	displays map[string]*entry

	pool warmPool
}

// entry is a display being started or running. ready is closed when start
// has finished; d is nil if it failed. tenant owns it from the start, so a
// display still starting is hidden from other tenants too.
type entry struct {
	ready  chan struct{}
	d      *display
	err    error
	tenant string
}

// display is a running X server and this service's connection to it.
type display struct {
	sessionID string
	// tenant owns the display; "" when it was created for no tenant.
	tenant string
	// sizeMu guards width and height, which ResizeDisplay (or a program on
	// the display, with RandR) changes. sizeStale is set when the server
	// reports a change: the next size() reads the size again.
	sizeMu    sync.Mutex
	width     int
	height    int
	sizeStale atomic.Bool
	depth     int
	// dpi is what create asked for (0: the server's default); screenDPI is
	// what the server reports, which a resize keeps.
	dpi       int
	screenDPI int
	created   time.Time
	dir       string
	xauthPath string
	server    *xserver.Server
	conn      *xgb.Conn
	screen    capture.Screen
	input     *xinput.Injector
	watch     *capture.Watcher
	windows   *windows.Lister
	// selections owns and reads CLIPBOARD and PRIMARY.
	selections *selection.Selections
	root       xproto.Window
	// wakeAtom is the root property changed to wake a window manager (wake.go).
	wakeAtom xproto.Atom
	// events ends when conn closes.
	events chan struct{}

	// inputMu keeps one request's actions together and guards leaseToken,
	// the newest input lease fencing token seen.
	inputMu    sync.Mutex
	leaseToken int64
	// leaseHeld: leaseToken's holder has not released it.
	leaseHeld bool
	// shotMu guards the shared-memory segment from grab to encoded bytes;
	// shared is created at the first screenshot, noShared when it cannot be.
	shotMu   sync.Mutex
	shared   *capture.Shared
	noShared bool
	// cursorOK: the server has XFIXES, for the cursor overlay.
	cursorOK bool
	// done ends work in flight on the display (waits, typing) when it is
	// being stopped.
	done     context.Context
	finish   context.CancelFunc
	stopping atomic.Bool
	dead     atomic.Bool
	// viewers counts the VNC viewers connected now.
	viewers atomic.Int32
	// label is the session id for the display's own goroutines' logs; a
	// warm display gets its session after they started.
	label atomic.Pointer[string]
}

// size is the screen's size now.
func (d *display) size() (int, int) {
	d.sizeMu.Lock()
	defer d.sizeMu.Unlock()
	// Cleared before reading, so a change reported meanwhile is read next
	// time. The read happens here, not in the event reader, which must never
	// wait for a reply.
	if d.sizeStale.CompareAndSwap(true, false) {
		if w, h, err := resize.Size(d.conn, d.root); err == nil && (w != d.width || h != d.height) {
			d.width, d.height = w, h
			// Best effort: the record only helps clean up after a crash.
			_ = writeMeta(d.dir, d.metaLocked())
		}
	}
	return d.width, d.height
}

// screenDPI is the horizontal resolution the server reports for its
// screen, rounded.
func screenDPI(c *xgb.Conn) int {
	root := xproto.Setup(c).DefaultScreen(c)
	if root.WidthInMillimeters == 0 {
		return 96
	}
	return int(math.Round(float64(root.WidthInPixels) * 25.4 / float64(root.WidthInMillimeters)))
}

func (d *display) setOwner(sessionID string) { d.label.Store(&sessionID) }

func (d *display) owner() string {
	if p := d.label.Load(); p != nil {
		return *p
	}
	return ""
}

func (d *display) xDisplay() string { return ":" + strconv.Itoa(d.server.Display) }

// meta is written beside each display so a later process can find and
// remove what a crashed one left.
type meta struct {
	SessionID  string    `json:"session_id"`
	Tenant     string    `json:"tenant,omitempty"`
	Display    int       `json:"display"`
	PID        int       `json:"pid"`
	Width      int       `json:"width"`
	Height     int       `json:"height"`
	Depth      int       `json:"depth"`
	DPI        int       `json:"dpi"`
	CreateTime time.Time `json:"create_time"`
}

const (
	metaFile  = "display.json"
	xauthFile = "Xauthority"
	logFile   = "xvfb.log"
	vncSocket = "vnc.sock"
)

// New returns a service; it starts nothing until displays are created.
func New(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	def := DefaultConfig()
	if cfg.RuntimeDir == "" {
		return nil, errors.New("display: RuntimeDir is required")
	}
	if cfg.XvfbPath == "" {
		cfg.XvfbPath = def.XvfbPath
	}
	if cfg.FirstDisplay <= 0 {
		cfg.FirstDisplay = def.FirstDisplay
	}
	if cfg.MaxDisplays <= 0 {
		cfg.MaxDisplays = def.MaxDisplays
	}
	if cfg.WarmDisplays < 0 {
		cfg.WarmDisplays = 0
	}
	if cfg.DefaultWidth <= 0 {
		cfg.DefaultWidth = def.DefaultWidth
	}
	if cfg.DefaultHeight <= 0 {
		cfg.DefaultHeight = def.DefaultHeight
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = def.StartTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = def.StopTimeout
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = def.MaxWait
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = def.SettleTimeout
	}
	if cfg.SettleQuiet <= 0 {
		cfg.SettleQuiet = def.SettleQuiet
	}
	if cfg.SettleChange <= 0 {
		cfg.SettleChange = def.SettleChange
	}
	if cfg.SettleMaxQuiet <= 0 {
		cfg.SettleMaxQuiet = def.SettleMaxQuiet
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(cfg.RuntimeDir, "displays"), 0o700); err != nil {
		return nil, fmt.Errorf("display: create runtime dir: %w", err)
	}
	s := &Service{
		cfg:      cfg,
		log:      log.With("service", "display"),
		encoder:  capture.NewEncoder(),
		displays: make(map[string]*entry),
		tenancy:  deps.Tenancy,
	}
	s.startPool()
	return s, nil
}

// Register registers the DisplayService.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	displayv1.RegisterDisplayServiceServer(r, s)
}

var (
	errNotFound      = errors.New("not found")
	errAlreadyExists = errors.New("already exists")
	errClosed        = errors.New("display service is shutting down")
	errExhausted     = errors.New("no capacity")
	errGone          = errors.New("display lost")
	errStaleLease    = errors.New("stale input lease")
	errCannotResize  = errors.New("the X server cannot take this size")
	errResized       = errors.New("screen resized")
	// errNoText is a selection holding something other than text.
	errNoText = errors.New("no text in the selection")
	// errUnresponsive is a program on the display that does not answer.
	errUnresponsive    = errors.New("a program on the display did not answer")
	errNoWindowManager = errors.New("needs a window manager")
)

// invalidError is a request the caller must change.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

func (s *Service) sessionDir(sessionID string) string {
	return filepath.Join(s.cfg.RuntimeDir, "displays", sessionID)
}

// displaySpec is a validated create request.
type displaySpec struct {
	sessionID                 string
	tenant                    string
	width, height, depth, dpi int
}

// create starts a display for spec.
func (s *Service) create(ctx context.Context, spec displaySpec) (*display, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	if _, ok := s.displays[spec.sessionID]; ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("session %s already has a display: %w", spec.sessionID, errAlreadyExists)
	}
	if len(s.displays) >= s.cfg.MaxDisplays {
		s.mu.Unlock()
		return nil, fmt.Errorf("this node runs %d displays, its limit: %w", len(s.displays), errExhausted)
	}
	e := &entry{ready: make(chan struct{}), tenant: spec.tenant}
	s.displays[spec.sessionID] = e
	s.mu.Unlock()

	d := s.takeWarm(ctx, spec)
	// Tells the caller's metrics whether the warm pool served it.
	_ = grpc.SetTrailer(ctx, metadata.Pairs("deskgrid-metric-warm", strconv.FormatBool(d != nil)))
	var err error
	if d == nil {
		d, err = s.start(ctx, spec)
	}
	if err == nil {
		s.log.InfoContext(ctx, "display started", "session_id", spec.sessionID,
			"x_display", d.xDisplay(), "pid", d.server.PID, "width", spec.width, "height", spec.height)
	}
	e.d, e.err = d, err
	if err != nil {
		s.mu.Lock()
		delete(s.displays, spec.sessionID)
		s.mu.Unlock()
	}
	close(e.ready)
	return d, err
}

func (s *Service) start(ctx context.Context, spec displaySpec) (*display, error) {
	return s.launch(ctx, s.sessionDir(spec.sessionID), spec)
}

// launch starts an X server whose files live in dir and connects to it.
func (s *Service) launch(ctx context.Context, dir string, spec displaySpec) (_ *display, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	// A directory left from an earlier display of this session holds nothing
	// live (Reconcile or Delete would have dealt with a live one).
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("clear session dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create session dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	cookie, err := xauthority.NewCookie()
	if err != nil {
		return nil, err
	}
	xauthPath := filepath.Join(dir, xauthFile)
	if err := xauthority.Write(xauthPath, cookie); err != nil {
		return nil, err
	}
	srv, err := xserver.Start(ctx, xserver.Options{
		Binary:       s.cfg.XvfbPath,
		Width:        spec.width,
		Height:       spec.height,
		Depth:        spec.depth,
		DPI:          spec.dpi,
		GLX:          s.cfg.GLX,
		AuthFile:     xauthPath,
		LogFile:      filepath.Join(dir, logFile),
		FirstDisplay: s.cfg.FirstDisplay,
		Displays:     s.cfg.MaxDisplays + s.cfg.WarmDisplays,
		StopTimeout:  s.cfg.StopTimeout,
		VNCSocket:    filepath.Join(dir, vncSocket),
		DesktopName:  "deskgrid",
	})
	if err != nil {
		if errors.Is(err, xserver.ErrNoFreeDisplay) {
			return nil, fmt.Errorf("%w: %w", errExhausted, err)
		}
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = srv.Stop(context.Background())
		}
	}()
	d := &display{
		sessionID: spec.sessionID,
		tenant:    spec.tenant,
		width:     spec.width,
		height:    spec.height,
		depth:     spec.depth,
		dpi:       spec.dpi,
		created:   time.Now().UTC(),
		dir:       dir,
		xauthPath: xauthPath,
		server:    srv,
	}
	d.setOwner(spec.sessionID)
	if err := writeMeta(dir, d.metaLocked()); err != nil {
		return nil, err
	}
	conn, err := xconn.Dial(ctx, srv.Display, cookie)
	if err != nil {
		return nil, err
	}
	screen, err := capture.ScreenOf(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	input, err := xinput.New(conn, screen.Root)
	if err != nil {
		conn.Close()
		return nil, err
	}
	watch, err := capture.Watch(conn, screen.Root)
	if err != nil {
		conn.Close()
		return nil, err
	}
	lister, err := windows.New(conn, screen.Root)
	if err != nil {
		conn.Close()
		return nil, err
	}
	sels, err := selection.New(conn, screen.Root)
	if err != nil {
		conn.Close()
		return nil, err
	}
	d.selections = sels
	d.screenDPI = spec.dpi
	if d.screenDPI == 0 {
		d.screenDPI = screenDPI(conn)
	}
	// A program on the display may resize it too (xrandr); the size is
	// read again when the server says it changed.
	if err := resize.Watch(conn, screen.Root); err != nil {
		conn.Close()
		return nil, err
	}
	// The cursor overlay needs XFIXES; screenshots go on without it.
	d.cursorOK = capture.InitCursor(conn) == nil
	d.conn, d.screen, d.input, d.watch, d.windows = conn, screen, input, watch, lister
	d.root = screen.Root
	if err := d.watchNewWindows(); err != nil {
		conn.Close()
		return nil, err
	}
	d.done, d.finish = context.WithCancel(context.Background())
	d.events = make(chan struct{})
	go s.readEvents(d)
	go s.watchServer(d)
	s.log.DebugContext(ctx, "X server started", "session_id", spec.sessionID,
		"x_display", d.xDisplay(), "pid", srv.PID, "width", spec.width, "height", spec.height)
	return d, nil
}

// watchServer notices an X server that exits without being asked to, so
// requests fail with a clear message instead of a broken connection.
func (s *Service) watchServer(d *display) {
	<-d.server.Exited()
	if d.stopping.Load() {
		return
	}
	d.dead.Store(true)
	s.log.Error("X server exited unexpectedly", "session_id", d.owner(),
		"x_display", d.xDisplay(), "pid", d.server.PID)
}

// usable fails for a display whose X server has died.
func (d *display) usable() error {
	if d.dead.Load() {
		return fmt.Errorf("the X server of session %s exited; delete the display and create it again: %w", d.sessionID, errGone)
	}
	return nil
}

// explain turns an error from a connection whose display is being deleted,
// or whose server has just died, into the error that says so.
func (d *display) explain(err error) error {
	if err == nil {
		return nil
	}
	if d.stopping.Load() {
		return fmt.Errorf("the display of session %s was deleted: %w", d.sessionID, errNotFound)
	}
	select {
	case <-d.server.Exited():
		return fmt.Errorf("the X server of session %s exited; delete the display and create it again: %w", d.sessionID, errGone)
	default:
		return err
	}
}

// readEvents consumes the connection's events, which xgb would otherwise
// queue until it blocks: damage for settling, keymap changes for input.
func (s *Service) readEvents(d *display) {
	defer close(d.events)
	for {
		ev, xerr := d.conn.WaitForEvent()
		if ev == nil && xerr == nil {
			return
		}
		if xerr != nil {
			s.log.Debug("X error", "session_id", d.owner(), "err", xerr.Error())
			continue
		}
		if d.watch.Handle(ev) || d.selections.Handle(ev) || d.handleNewWindow(ev) {
			continue
		}
		if resize.IsChange(ev) {
			d.sizeStale.Store(true)
			continue
		}
		if m, ok := ev.(xproto.MappingNotifyEvent); ok && m.Request == xproto.MappingKeyboard {
			d.input.MappingChanged()
		}
	}
}

func (d *display) meta() meta {
	d.size()
	d.sizeMu.Lock()
	defer d.sizeMu.Unlock()
	return d.metaLocked()
}

// metaLocked is meta for a caller holding sizeMu.
func (d *display) metaLocked() meta {
	return meta{
		SessionID: d.sessionID, Tenant: d.tenant, Display: d.server.Display, PID: d.server.PID,
		Width: d.width, Height: d.height, Depth: d.depth, DPI: d.dpi, CreateTime: d.created,
	}
}

func writeMeta(dir string, m meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("write display meta: %w", err)
	}
	tmp := filepath.Join(dir, metaFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write display meta: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, metaFile)); err != nil {
		return fmt.Errorf("write display meta: %w", err)
	}
	return nil
}

func readMeta(dir string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return m, fmt.Errorf("read display meta: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("read display meta %s: %w", dir, err)
	}
	return m, nil
}

// entryFor is the one place a session's display is looked up for a caller:
// another tenant's display is reported missing exactly as an unknown one,
// so the answer tells nothing of whether it exists.
func (s *Service) entryFor(ctx context.Context, sessionID string) (*entry, bool) {
	s.mu.Lock()
	e, ok := s.displays[sessionID]
	s.mu.Unlock()
	if !ok || !s.tenancy.Sees(ctx, e.tenant) {
		return nil, false
	}
	return e, true
}

// get returns the running display of a session, waiting for one that is
// still starting.
func (s *Service) get(ctx context.Context, sessionID string) (*display, error) {
	e, ok := s.entryFor(ctx, sessionID)
	if !ok {
		return nil, fmt.Errorf("no display for session %s: %w", sessionID, errNotFound)
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if e.d == nil {
		return nil, fmt.Errorf("no display for session %s: %w", sessionID, errNotFound)
	}
	return e.d, nil
}

// list returns the ready displays the caller may see.
func (s *Service) list(ctx context.Context) []*display {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*display
	for _, e := range s.displays {
		if !s.tenancy.Sees(ctx, e.tenant) {
			continue
		}
		select {
		case <-e.ready:
			if e.d != nil {
				out = append(out, e.d)
			}
		default:
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].sessionID < out[j].sessionID })
	return out
}

// remove stops a session's display and removes its files. A session without
// a display is not an error, and neither is another tenant's: that display
// is left alone, the answer the same as for a session without one.
func (s *Service) remove(ctx context.Context, sessionID string) error {
	s.mu.Lock()
	e, ok := s.displays[sessionID]
	s.mu.Unlock()
	if ok && !s.tenancy.Sees(ctx, e.tenant) {
		return nil
	}
	if ok {
		select {
		case <-e.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
		// Another remove may have taken it, or a new display replaced it.
		if s.displays[sessionID] == e {
			delete(s.displays, sessionID)
		} else {
			e = nil
		}
		s.mu.Unlock()
	}
	if e != nil && e.d != nil {
		return s.stop(ctx, e.d)
	}
	if !ok {
		// Nothing running here; still clear files a failed start or an
		// earlier process may have left, unless another tenant's.
		if m, err := readMeta(s.sessionDir(sessionID)); err == nil && !s.tenancy.Sees(ctx, m.Tenant) {
			return nil
		}
		_, err := s.claimLeftover(ctx, sessionID)
		return err
	}
	return nil
}

func (s *Service) stop(ctx context.Context, d *display) error {
	d.stopping.Store(true)
	d.finish()
	d.inputMu.Lock()
	d.conn.Close()
	d.inputMu.Unlock()
	err := d.server.Stop(ctx)
	d.shotMu.Lock()
	if d.shared != nil {
		_ = d.shared.Close()
		d.shared = nil
	}
	d.noShared = true
	d.shotMu.Unlock()
	// The server is gone, so the reader sees the connection end at once;
	// the bound is for a server that would not die.
	select {
	case <-d.events:
	case <-time.After(5 * time.Second):
	}
	if rerr := os.RemoveAll(d.dir); rerr != nil && err == nil {
		err = fmt.Errorf("remove session dir: %w", rerr)
	}
	s.log.InfoContext(ctx, "display stopped", "session_id", d.sessionID, "x_display", d.xDisplay())
	return err
}

// Lookup returns where a session's X server can be reached: its display name
// (such as ":101", whose socket is /tmp/.X11-unix/X101) and the Xauthority
// file holding its cookie, for bind-mounting both into the session's sandbox.
func (s *Service) Lookup(sessionID string) (xDisplay, xauthPath string, ok bool) {
	s.mu.Lock()
	e, found := s.displays[sessionID]
	s.mu.Unlock()
	if !found {
		return "", "", false
	}
	select {
	case <-e.ready:
	default:
		return "", "", false
	}
	if e.d == nil {
		return "", "", false
	}
	return e.d.xDisplay(), e.d.xauthPath, true
}

// Close stops every display this service started. New displays are refused
// from the moment it is called.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	errs := []error{s.stopPool(ctx)}
	s.mu.Lock()
	ids := make([]string, 0, len(s.displays))
	for id := range s.displays {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.remove(ctx, id); err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("stop display of %s: %w", id, err))
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Fence runs act as input to the session's display, under the input lease
// exactly as the display's own actions are: with inputMu held, after
// fencing token, so another service's input (the sandbox's accessibility
// acts) is refused as display input is, and never interleaves with it. A
// refusal is a FAILED_PRECONDITION status with the STALE_INPUT_LEASE
// reason, act not run; act's own error comes back unchanged. A session
// without a ready display has no lease to honour: act runs. The caller
// has checked the tenant.
func (s *Service) Fence(ctx context.Context, sessionID string, token int64, act func() error) error {
	s.mu.Lock()
	e, found := s.displays[sessionID]
	s.mu.Unlock()
	var d *display
	if found {
		select {
		case <-e.ready:
			d = e.d
		default:
		}
	}
	if d == nil {
		return act()
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	if err := d.fence(token); err != nil {
		return s.toStatus(ctx, err)
	}
	return act()
}
