// Package sandbox is deskgrid's per-session filesystem and process
// isolation on a node: an overlay per session over a read-only base or
// workspace, commands run under bubblewrap, and a file API that cannot leave
// the session's root.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/sandbox/image"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/cgroup"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/disk"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/overlay"
)

// Drivers accepted in Config.Driver.
const (
	DriverAuto   = "auto"
	DriverKernel = "overlayfs"
	DriverFUSE   = "fuse-overlayfs"
	DriverCopy   = overlay.CopyName
)

// Config configures a Service.
type Config struct {
	// Root holds the base, the sandboxes and the sandbox /etc files.
	Root string
	// BaseDir is the lower layer when a sandbox names no workspace; empty
	// means <Root>/base, created with an empty home layout when missing.
	BaseDir string
	// WorkspaceRoots are the directories beneath which a workspace may lie.
	// Empty means no workspace is accepted.
	WorkspaceRoots []string
	// Driver is "auto" (kernel overlayfs, falling back to fuse-overlayfs when
	// the kernel refuses, and to a plain copy of the lower when FUSE fails
	// too), "overlayfs", "fuse-overlayfs" or "copy". A copied sandbox has no
	// snapshots and no disk limit, and its changes are found by comparison.
	Driver string
	// FuseOverlayfsPath and BwrapPath name the helper programs.
	FuseOverlayfsPath string
	BwrapPath         string
	// SlirpPath names slirp4netns, which gives the sandboxes created with
	// network their outbound network.
	SlirpPath string
	// ExecTimeout is used when a request gives none; MaxExecTimeout bounds requests.
	ExecTimeout    time.Duration
	MaxExecTimeout time.Duration
	// ExecChunkBytes bounds one streamed output message.
	ExecChunkBytes int
	// MaxFileBytes bounds ReadFile and WriteFile.
	MaxFileBytes int64
	// MaxUploadBytes bounds one UploadFile.
	MaxUploadBytes int64
	// X11SocketDir is where the host's X servers put their sockets.
	X11SocketDir string
	// Etc lists the host /etc entries a sandbox sees; nil means jail.DefaultEtc.
	Etc []string
	// Cgroups is "auto" (limits when the node has a usable cgroup
	// hierarchy, a warning when not), "required" or "off".
	Cgroups string
	// CgroupParent is the group, below the cgroup root, holding one group
	// per sandbox named for its session.
	CgroupParent string
	// DiskBacking holds a layer with a disk_bytes limit: "auto" (ext4 when
	// mkfs.ext4 and mount are installed, else tmpfs), "ext4" or "tmpfs".
	DiskBacking string
	// MkfsPath and MountPath name the helpers of the ext4 backing.
	MkfsPath  string
	MountPath string
	// RuncPath and CatatonitPath name the programs that run a sandbox
	// created from an image: runc (Debian package runc) and the init of its
	// container (Debian package catatonit).
	RuncPath      string
	CatatonitPath string
	// ContainerDir holds the bundles and runc's state of this service's
	// containers; empty means a directory under /run/deskgrid/containers
	// named for Root.
	ContainerDir string
	// IDSlotDir holds the node's claims of host uid/gid ranges, shared by
	// every service on the node; IDRangeBase is the first host id handed
	// out (range n is IDRangeBase + n*65536, 65536 ids).
	IDSlotDir   string
	IDRangeBase uint32
	// NoSeccomp turns off the seccomp filter of sandboxed programs.
	NoSeccomp bool
	// Limits apply when a request names none; MaxLimits bound what a
	// request may ask for (zero: no bound).
	Limits    Limits
	MaxLimits Limits
}

// Values accepted in Config.Cgroups.
const (
	CgroupsAuto     = "auto"
	CgroupsRequired = "required"
	CgroupsOff      = "off"
)

// DefaultDiskBytes bounds a session's writable layer when its request
// names no disk_bytes, so one session cannot fill the node's disk. The node
// roles set it as Config.Limits.DiskBytes (-session-disk-bytes); a bare
// Config has no disk limit.
const DefaultDiskBytes = 2 << 30

// DefaultConfig returns the configuration used when nothing is set.
func DefaultConfig() Config {
	return Config{
		Root:              "/var/lib/deskgrid/sandbox",
		Driver:            DriverAuto,
		FuseOverlayfsPath: "fuse-overlayfs",
		BwrapPath:         "bwrap",
		SlirpPath:         "slirp4netns",
		RuncPath:          "runc",
		CatatonitPath:     "catatonit",
		IDSlotDir:         "/run/deskgrid/idslots",
		IDRangeBase:       1_000_000,
		ExecTimeout:       60 * time.Second,
		MaxExecTimeout:    time.Hour,
		ExecChunkBytes:    32 << 10,
		MaxFileBytes:      64 << 20,
		MaxUploadBytes:    8 << 30,
		X11SocketDir:      "/tmp/.X11-unix",
		Cgroups:           CgroupsAuto,
		DiskBacking:       "auto",
		MkfsPath:          "mkfs.ext4",
		MountPath:         "mount",
		CgroupParent:      cgroup.DefaultParent,
		Limits:            Limits{MemoryBytes: 2 << 30, CPUMillis: 1000, Pids: 512},
		MaxLimits:         Limits{MemoryBytes: 16 << 30, CPUMillis: int64(runtime.NumCPU()) * 1000, Pids: 8192},
	}
}

// Deps are what a Service uses from outside.
type Deps struct {
	Logger *slog.Logger
	// DisplayLookup, when set and ok, gives the X display (":N") and the
	// X authority file of a session; Exec then binds the display's socket and
	// cookie into the sandbox and sets DISPLAY and XAUTHORITY.
	DisplayLookup func(sessionID string) (xDisplay, xauthPath string, ok bool)
	// InputFence, when set, runs act as input to a session under its input
	// lease, the display's authority: it refuses a stale or missing lease
	// token with a FAILED_PRECONDITION status carrying the
	// STALE_INPUT_LEASE reason, act not run, and returns act's error
	// otherwise. Unset, nothing holds input leases on this node: act runs.
	InputFence func(ctx context.Context, sessionID string, token int64, act func() error) error
	// Windows, when set, lists a session's top-level windows as the
	// display's ListWindows does: the accessibility tree of a window (by id,
	// or the focused one) starts from it. Unset, those scopes are
	// FailedPrecondition.
	Windows func(ctx context.Context, sessionID string) ([]*displayv1.Window, error)
	// Drivers, when set, replaces the drivers chosen by Config.Driver.
	Drivers []overlay.Driver
	// Tenancy says who a call acts for (auth.CallerOf with auth on, nil
	// with auth off). The tenant of CreateSandbox owns the sandbox and its
	// snapshots; a call for another tenant, or an anonymous one, finds no
	// such sandbox or snapshot.
	Tenancy auth.Tenancy
	// Images is the node's image store, for sandboxes created from an image
	// and for commits; nil: this node runs sandboxes without images.
	Images *image.Store
}

// Service holds a node's sandboxes; Register serves them as
// sandboxv1.SandboxService.
type Service struct {
	cfg     Config
	log     *slog.Logger
	drivers overlay.Chain
	display func(string) (string, string, bool)
	fence   func(context.Context, string, int64, func() error) error
	windows func(context.Context, string) ([]*displayv1.Window, error)
	tenancy auth.Tenancy
	etcDir  string            // synthetic passwd and group for sandboxes
	cgroups *cgroup.Hierarchy // nil: no limits on this node
	disk    disk.Backing
	seccomp []byte // compiled filter; nil when off
	// ociSeccomp is the same policy for containers; nil when off.
	ociSeccomp *specs.LinuxSeccomp
	images     *image.Store

	mu     sync.Mutex
	boxes  map[string]*box
	closed bool
	// warm hands out desktops started ahead of demand; nil: none.
	warm WarmDesktops

	// limitsMu guards limits, the node's tally of limit events.
	limitsMu sync.Mutex
	limits   limitTally
}

// New prepares the directories under cfg.Root. It does not touch sandboxes
// left by a previous process: call Reconcile for that.
func New(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	def := DefaultConfig()
	if cfg.Root == "" {
		cfg.Root = def.Root
	}
	if cfg.Driver == "" {
		cfg.Driver = def.Driver
	}
	if cfg.FuseOverlayfsPath == "" {
		cfg.FuseOverlayfsPath = def.FuseOverlayfsPath
	}
	if cfg.BwrapPath == "" {
		cfg.BwrapPath = def.BwrapPath
	}
	if cfg.SlirpPath == "" {
		cfg.SlirpPath = def.SlirpPath
	}
	if cfg.RuncPath == "" {
		cfg.RuncPath = def.RuncPath
	}
	if cfg.CatatonitPath == "" {
		cfg.CatatonitPath = def.CatatonitPath
	}
	if cfg.IDSlotDir == "" {
		cfg.IDSlotDir = def.IDSlotDir
	}
	if cfg.IDRangeBase == 0 {
		cfg.IDRangeBase = def.IDRangeBase
	}
	if cfg.ExecTimeout <= 0 {
		cfg.ExecTimeout = def.ExecTimeout
	}
	if cfg.MaxExecTimeout <= 0 {
		cfg.MaxExecTimeout = def.MaxExecTimeout
	}
	if cfg.ExecChunkBytes <= 0 {
		cfg.ExecChunkBytes = def.ExecChunkBytes
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = def.MaxFileBytes
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = def.MaxUploadBytes
	}
	if cfg.X11SocketDir == "" {
		cfg.X11SocketDir = def.X11SocketDir
	}
	if cfg.Cgroups == "" {
		cfg.Cgroups = def.Cgroups
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = def.Limits
	}
	if cfg.MaxLimits == (Limits{}) {
		cfg.MaxLimits = def.MaxLimits
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("sandbox root: %w", err)
	}
	cfg.Root = root
	if cfg.ContainerDir == "" {
		cfg.ContainerDir = defaultContainerDir(cfg.Root)
	}
	if cfg.BaseDir == "" {
		cfg.BaseDir = filepath.Join(cfg.Root, "base")
		if err := makeBase(cfg.BaseDir); err != nil {
			return nil, err
		}
	}
	if cfg.BaseDir, err = filepath.EvalSymlinks(cfg.BaseDir); err != nil {
		return nil, fmt.Errorf("base dir: %w", err)
	}
	for _, p := range []string{cfg.Root, cfg.BaseDir} {
		if err := overlay.CheckPath(p); err != nil {
			return nil, fmt.Errorf("sandbox config: %w", err)
		}
	}
	roots := make([]string, 0, len(cfg.WorkspaceRoots))
	for _, w := range cfg.WorkspaceRoots {
		r, err := filepath.EvalSymlinks(w)
		if err != nil {
			return nil, fmt.Errorf("workspace root %s: %w", w, err)
		}
		roots = append(roots, r)
	}
	cfg.WorkspaceRoots = roots

	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Service{
		cfg:     cfg,
		log:     log.With("service", "sandbox"),
		display: deps.DisplayLookup,
		fence:   deps.InputFence,
		windows: deps.Windows,
		tenancy: deps.Tenancy,
		images:  deps.Images,
		etcDir:  filepath.Join(cfg.Root, "etc"),
		boxes:   map[string]*box{},
	}
	switch {
	case len(deps.Drivers) > 0:
		s.drivers = overlay.Chain(deps.Drivers)
	case cfg.Driver == DriverAuto:
		s.drivers = overlay.Chain{overlay.Kernel{}, overlay.FUSE{Binary: cfg.FuseOverlayfsPath}, overlay.Copy{}}
	case cfg.Driver == DriverKernel:
		s.drivers = overlay.Chain{overlay.Kernel{}}
	case cfg.Driver == DriverFUSE:
		s.drivers = overlay.Chain{overlay.FUSE{Binary: cfg.FuseOverlayfsPath}}
	case cfg.Driver == DriverCopy:
		s.drivers = overlay.Chain{overlay.Copy{}}
	default:
		return nil, fmt.Errorf("unknown overlay driver %q: want %q, %q, %q or %q", cfg.Driver, DriverAuto, DriverKernel, DriverFUSE, DriverCopy)
	}
	if err := os.MkdirAll(s.sandboxesDir(), 0o700); err != nil {
		return nil, fmt.Errorf("sandbox dir: %w", err)
	}
	if err := writeEtc(s.etcDir); err != nil {
		return nil, err
	}
	if deps.Images != nil {
		if cat, err := exec.LookPath(cfg.CatatonitPath); err == nil {
			s.cfg.CatatonitPath = cat
		} else {
			s.log.WarnContext(ctx, "catatonit not found: sessions from images will fail", "catatonit", cfg.CatatonitPath, "error", err)
		}
	}
	if !cfg.NoSeccomp {
		if s.seccomp, err = jail.SeccompFilter(); err != nil {
			return nil, fmt.Errorf("sandbox seccomp filter: %w (set NoSeccomp to run without)", err)
		}
		if s.ociSeccomp, err = jail.OCISeccomp(); err != nil {
			return nil, fmt.Errorf("sandbox seccomp filter: %w (set NoSeccomp to run without)", err)
		}
	}
	switch cfg.DiskBacking {
	case "", "auto":
		s.disk = disk.Choose(cfg.MkfsPath, cfg.MountPath)
	case disk.Ext4, disk.Tmpfs:
		s.disk = disk.Backing{Kind: cfg.DiskBacking, Mkfs: cfg.MkfsPath, Mount: cfg.MountPath}
	default:
		return nil, fmt.Errorf("unknown disk backing %q: want auto, ext4 or tmpfs", cfg.DiskBacking)
	}
	switch cfg.Cgroups {
	case CgroupsOff:
	case CgroupsAuto, CgroupsRequired:
		h, err := cgroup.Detect(cfg.CgroupParent)
		if err == nil {
			err = h.Check()
		}
		switch {
		case err == nil:
			s.cgroups = &h
		case cfg.Cgroups == CgroupsRequired:
			return nil, fmt.Errorf("sandbox cgroups: %w", err)
		default:
			s.log.WarnContext(ctx, "no usable cgroups: sandboxes run without memory, CPU and pids limits", "error", err)
		}
	default:
		return nil, fmt.Errorf("unknown cgroups setting %q: want %q, %q or %q", cfg.Cgroups, CgroupsAuto, CgroupsRequired, CgroupsOff)
	}
	if _, err := exec.LookPath(cfg.BwrapPath); err != nil {
		// Sandboxes still work for files; Exec reports the missing program.
		s.log.WarnContext(ctx, "bubblewrap not found: Exec will fail", "bwrap", cfg.BwrapPath, "error", err)
	}
	return s, nil
}

// makeBase creates the default lower layer: an empty home.
func makeBase(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	for _, d := range []string{".config", ".cache", ".local/share", "Desktop"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("base dir: %w", err)
		}
	}
	return nil
}

// writeEtc writes the accounts a sandbox sees instead of the host's.
func writeEtc(dir string) error {
	files := map[string]string{
		"passwd": fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nuser:x:%d:%d:user:%s:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", jail.UID, jail.GID, jail.Home),
		"group":  fmt.Sprintf("root:x:0:\nuser:x:%d:\nnogroup:x:65534:\n", jail.GID),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sandbox etc: %w", err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("sandbox etc: %w", err)
		}
	}
	return nil
}

func (s *Service) sandboxesDir() string { return filepath.Join(s.cfg.Root, "sandboxes") }

// Register registers the SandboxService.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	sandboxv1.RegisterSandboxServiceServer(r, &server{s: s})
}

// Close deletes every sandbox this Service holds (created or adopted by
// Reconcile) and refuses new ones.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	ids := make([]string, 0, len(s.boxes))
	for id := range s.boxes {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := s.deleteSandbox(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if s.cgroups != nil && len(errs) == 0 {
		s.cgroups.RemoveParent() // only when empty: another node may share it
	}
	if s.images != nil && len(errs) == 0 {
		// Only when empty: a container adopted later keeps its state.
		_ = os.Remove(s.runtime().Root)
		_ = os.Remove(s.cfg.ContainerDir)
	}
	return errors.Join(errs...)
}

// asInput runs act as input to a session, under its input lease as the
// display's actions are (Deps.InputFence). A negative token is refused.
func (s *Service) asInput(ctx context.Context, sessionID string, token int64, act func() error) error {
	if token < 0 {
		return invalidf("lease_token %d is negative", token)
	}
	if s.fence == nil {
		return act()
	}
	return s.fence(ctx, sessionID, token, act)
}
