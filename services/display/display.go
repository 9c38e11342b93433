package display

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	"github.com/deskgrid/deskgrid/services/display/internal/capture"
	"github.com/deskgrid/deskgrid/services/display/internal/resize"
	"github.com/deskgrid/deskgrid/services/display/internal/selection"
	"github.com/deskgrid/deskgrid/services/display/internal/windows"
	"github.com/deskgrid/deskgrid/services/display/internal/xinput"
	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
)

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

// usable fails for a display whose X server has died.
func (d *display) usable() error {
	if d.dead.Load() {
		return fmt.Errorf("the X server of session %s exited; delete the display and create it again: %w", d.sessionID, errGone)
	}
	return nil
}

// grab captures rect of the screen, through the shared-memory segment when
// there is one. The caller holds shotMu.
func (d *display) grab(rect capture.Rect) (*capture.Frame, error) {
	if d.shared != nil {
		return d.shared.Grab(d.screen, rect)
	}
	return capture.Grab(d.conn, d.screen, rect)
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
