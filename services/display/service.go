// Package display runs one private X server per session and serves its
// screenshots and input over gRPC (deskgrid.display.v1.DisplayService).
package display

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/capture"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/events"
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

	// RecordingDir holds videos while they are recorded (a disk, not a
	// tmpfs); <RuntimeDir>/recordings when empty.
	RecordingDir string
	// FFmpegPath is the encoder binary; "ffmpeg" from PATH when empty.
	FFmpegPath string
	// RecordingMinFree is the free space on RecordingDir's disk below which
	// a recording stops (failed, with the reason) and none starts.
	RecordingMinFree int64
	// RecordingFinishTimeout bounds ffmpeg's finishing of a video once its
	// input has ended.
	RecordingFinishTimeout time.Duration
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

		FFmpegPath:             "ffmpeg",
		RecordingMinFree:       256 << 20,
		RecordingFinishTimeout: 30 * time.Second,
	}
}

// Deps are the service's collaborators.
type Deps struct {
	Logger *slog.Logger
	// Tenancy says who a call acts for (auth.CallerOf with auth on, nil
	// with auth off). The tenant of CreateDisplay owns the display; a
	// call for another tenant, or an anonymous one, finds no such display.
	Tenancy auth.Tenancy
	// Events publishes the display's own events (recordings), and Videos
	// takes finished recordings for the history; without both, recording
	// is refused (Unavailable).
	Events events.Publisher
	Videos VideoSink
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

	events events.Publisher
	videos VideoSink
	// recMu guards recordings (the running one of each session, by session
	// id) and ended (recent results, by recording id).
	recMu      sync.Mutex
	recordings map[string]*recording
	ended      map[string]*displayv1.Recording
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
	if cfg.RecordingDir == "" {
		cfg.RecordingDir = filepath.Join(cfg.RuntimeDir, "recordings")
	}
	if cfg.FFmpegPath == "" {
		cfg.FFmpegPath = def.FFmpegPath
	}
	if cfg.RecordingMinFree <= 0 {
		cfg.RecordingMinFree = def.RecordingMinFree
	}
	if cfg.RecordingFinishTimeout <= 0 {
		cfg.RecordingFinishTimeout = def.RecordingFinishTimeout
	}
	if err := os.MkdirAll(cfg.RecordingDir, 0o700); err != nil {
		return nil, fmt.Errorf("display: create recording dir: %w", err)
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

		events:     deps.Events,
		videos:     deps.Videos,
		recordings: make(map[string]*recording),
		ended:      make(map[string]*displayv1.Recording),
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
	// errTooLarge is a selection holding more than the service reads.
	errTooLarge = errors.New("too large")
	// errUnresponsive is a program on the display that does not answer.
	errUnresponsive    = errors.New("a program on the display did not answer")
	errNoWindowManager = errors.New("needs a window manager")
	// errEnded is a recording that has already stopped or failed.
	errEnded = errors.New("recording has ended")
	// errDiskFull is a disk too full to record to.
	errDiskFull = errors.New("disk full")
)

// invalidError is a request the caller must change.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
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
