package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deskgrid/deskgrid/services/sandbox/cgroup"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/overlay"
)

// box is one session's sandbox.
type box struct {
	id string
	// cid names the sandbox's container, bundle and cgroup: its id, unless
	// it was made ahead of its session and given to it later (Rekey).
	cid string
	// warm: made ahead of its session (CreateWarm) and not given to one
	// yet; no list shows it. Guarded by the Service's mu.
	warm bool
	// tenant owns the sandbox; "" when it was created for no tenant.
	tenant  string
	dir     string
	lower   string
	owner   *overlay.Owner // set for a workspace of an ordinary host user
	driver  overlay.Driver
	created time.Time
	limits  Limits
	cg      *cgroup.Group // nil on a node without cgroups
	// disk is the backing of a size-limited layer ("ext4", "tmpfs"), or empty.
	disk string
	// diskFull: the disk was found full when the node's limit counts were
	// last read (sweepFullDisks), so it is counted once.
	diskFull atomic.Bool
	// desktopStart is when its image's desktop program was started (unix
	// nanoseconds; 0 before); a11ySettled: its programs no longer wait for
	// the desktop's accessibility bus (awaitA11yBus): it runs, or was
	// waited for once.
	desktopStart atomic.Int64
	a11ySettled  atomic.Bool
	// fromSnapshot is the snapshot the layer was created from, if any.
	fromSnapshot string
	// network gives its commands outbound network.
	network bool
	// image is the image it runs, as asked, and that image's digest (pinned
	// in the node's image store for the box's life); empty for none.
	image, imageDigest string
	// img is set for a sandbox that runs its image as a container.
	img *boxImage
	// xmu serialises placing the display in the container.
	xmu sync.Mutex
	// slirp serves a container sandbox's network, when it has one.
	slirp *jail.Slirp

	// layer is held for reading by every call using the mounted layer, and
	// for writing while DiscardChanges remounts it.
	layer sync.RWMutex
	// applied records, per path, the lower's ctime after ApplyChanges wrote
	// it, so that the sandbox's own apply is not taken for a conflict.
	applied map[string]int64

	// shellMu serialises the persistent shell's calls.
	shellMu sync.Mutex
	shell   *shell
	// rootShell is the persistent shell as root of the session's own user
	// namespace (RunShell as_root).
	rootShell *shell

	// pmu guards the started programs and the frozen flag.
	pmu      sync.Mutex
	procs    map[string]*proc
	nextProc int
	// restart holds the started programs that ended with the container
	// while it restarts (unmountRoot), to start again after (exclusive).
	restart []*proc
	frozen  bool

	// ready is closed when creation has finished, well or not.
	ready chan struct{}
	ok    bool // set before ready closes

	// kill is cancelled when the sandbox is deleted: it stops every command.
	kill   context.Context
	cancel context.CancelFunc
	// users counts calls working inside the sandbox; deletion waits for them.
	users    sync.WaitGroup
	deleting bool
	deleted  chan struct{}
}

func (b *box) merged() string { return filepath.Join(b.dir, "merged") }

// meta is what a sandbox records about itself on disk, so that a restarted
// node can recognise and adopt or remove it.
type meta struct {
	SessionID string         `json:"session_id"`
	Tenant    string         `json:"tenant,omitempty"`
	Lower     string         `json:"lower"`
	Owner     *overlay.Owner `json:"owner,omitempty"`
	Driver    string         `json:"driver"`
	Created   time.Time      `json:"created"`
	Limits    Limits         `json:"limits"`
	Disk      string         `json:"disk,omitempty"`
	Network   bool           `json:"network,omitempty"`
	// Image is set for a sandbox run as a container of its image.
	Image *boxImage `json:"image,omitempty"`
	// Container names the container and cgroup when not SessionID: the
	// sandbox was made ahead of its session (a warm desktop).
	Container string `json:"container,omitempty"`
}

// containerID is what names m's container and cgroup.
func (m meta) containerID(id string) string {
	if m.Container != "" {
		return m.Container
	}
	return id
}

const maxSessionID = 64

func validateSessionID(id string) error {
	if id == "" {
		return invalidf("session_id is required")
	}
	if len(id) > maxSessionID {
		return invalidf("session_id is %d characters; at most %d are allowed", len(id), maxSessionID)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return invalidf("session_id %q may contain only a-z, 0-9 and '-'", id)
		}
	}
	return nil
}

func (b *box) meta() meta {
	m := meta{SessionID: b.id, Tenant: b.tenant, Lower: b.lower, Owner: b.owner, Created: b.created, Limits: b.limits, Disk: b.disk, Network: b.network, Image: b.img}
	if b.cid != b.id {
		m.Container = b.cid
	}
	if b.driver != nil {
		m.Driver = b.driver.Name()
	}
	return m
}

func writeMeta(dir string, m meta) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "meta.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write sandbox meta: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "meta.json")); err != nil {
		return fmt.Errorf("write sandbox meta: %w", err)
	}
	return nil
}

func readMeta(dir string) (meta, error) {
	var m meta
	data, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("parse %s: %w", filepath.Join(dir, "meta.json"), err)
	}
	return m, nil
}
