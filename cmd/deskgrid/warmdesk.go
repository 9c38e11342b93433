package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/display"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/sandbox"
	imagestore "github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/session"
)

// desktopPool keeps sessions of the node's default image fully started
// (container running, X server, window manager and panel drawn) under ids of
// their own, for no tenant, so that a create that fits is handed one at
// once (sandbox.WarmDesktops). A member is given to exactly one session and
// never used before: it is taken off the pool under its lock, and what it
// ran before is only its own desktop.
type desktopPool struct {
	size    int
	image   string
	spec    sandbox.DisplaySpec
	argv    []string
	display *display.Service
	sandbox *sandbox.Service
	log     *slog.Logger

	mu    sync.Mutex
	ready []string // pool ids, oldest first
	// owned are the members not given to a session, ready or starting.
	owned  map[string]bool
	refill chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	// unobserve stops deskgrid_warm_desktops for the pool.
	unobserve func() error
}

// warmImage is an image a pool keeps desktops of, and how many.
type warmImage struct {
	ref   string
	count int
}

// warmImages lists the pools a node keeps: defaultCount desktops of
// defaultImage (-warm-desktops) and those of -warm-images (ref=count,...).
// An image named twice is an error: one pool per image.
func warmImages(defaultCount int, defaultImage, spec string) ([]warmImage, error) {
	var out []warmImage
	seen := map[string]bool{}
	if defaultCount > 0 && defaultImage != "" {
		out = append(out, warmImage{defaultImage, defaultCount})
		if r, err := imagestore.ParseRef(defaultImage); err == nil {
			seen[r.Name] = true
		}
	}
	for _, kv := range splitList(spec) {
		i := strings.LastIndexByte(kv, '=')
		if i <= 0 {
			return nil, usageError("-warm-images: %q: want ref=count", kv)
		}
		ref := strings.TrimSpace(kv[:i])
		n, err := strconv.Atoi(strings.TrimSpace(kv[i+1:]))
		if err != nil || n < 1 || n > 64 {
			return nil, usageError("-warm-images: %q: the count must be a whole number from 1 to 64", kv)
		}
		r, err := imagestore.ParseRef(ref)
		if err != nil {
			return nil, usageError("-warm-images: %v", err)
		}
		if seen[r.Name] {
			return nil, usageError("-warm-images: %s is kept warm twice (the default image's pool is -warm-desktops)", ref)
		}
		seen[r.Name] = true
		out = append(out, warmImage{ref, n})
	}
	return out, nil
}

// desktopPools are a node's pools, one per image (sandbox.WarmDesktops):
// a create is given a member of the pool whose image it resolves to.
type desktopPools []*desktopPool

// Claim implements sandbox.WarmDesktops. Each call is counted once in
// deskgrid_warm_desktop_claims_total: a hit under the image of the pool that
// gave the desktop, a miss under the image of the pool that keeps the
// create's image (the same normalised ref), or "other" when no pool keeps it.
func (ps desktopPools) Claim(ctx context.Context, sessionID, tenant string, req *sandboxv1.CreateSandboxRequest, spec sandbox.DisplaySpec) bool {
	for _, p := range ps {
		if p.Claim(ctx, sessionID, tenant, req, spec) {
			metrics.WarmDesktopClaimed(ctx, p.image, true)
			return true
		}
	}
	metrics.WarmDesktopClaimed(ctx, ps.imageLabel(req.GetImage()), false)
	return false
}

// imageLabel is the ref of the pool keeping image (normalised refs equal), or
// "other": what a create names is not a label value of its own.
func (ps desktopPools) imageLabel(image string) string {
	want, err := imagestore.ParseRef(image)
	if err != nil {
		return "other"
	}
	for _, p := range ps {
		if r, err := imagestore.ParseRef(p.image); err == nil && r.Name == want.Name {
			return p.image
		}
	}
	return "other"
}

// owns reports whether id is a member of one of the pools.
func (ps desktopPools) owns(id string) bool {
	for _, p := range ps {
		if p.owns(id) {
			return true
		}
	}
	return false
}

// Close closes every pool.
func (ps desktopPools) Close(ctx context.Context) error {
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close(ctx))
	}
	return errors.Join(errs...)
}

// warmDesktopPrefix starts the ids of pool members: no session id has it
// (session ids are UUIDs).
const warmDesktopPrefix = "warm-"

func newDesktopPool(size int, ref string, spec sandbox.DisplaySpec, argv []string, d *display.Service, b *sandbox.Service, log *slog.Logger) *desktopPool {
	p := &desktopPool{size: size, image: ref, spec: spec, argv: argv, display: d, sandbox: b, log: log,
		refill: make(chan struct{}, 1), done: make(chan struct{}), owned: map[string]bool{}}
	// The pool's own work acts as the system: its desktops belong to no
	// tenant until Claim gives one to a session.
	ctx, cancel := context.WithCancel(auth.AsSystem(context.Background()))
	p.cancel = cancel
	if stop, err := metrics.ObserveWarmDesktops(ref, p.readyCount); err == nil {
		p.unobserve = stop
	} else {
		log.Warn("warm desktop gauge", "err", err)
	}
	p.refill <- struct{}{}
	go p.fill(ctx)
	return p
}

// fill keeps the pool full until ctx ends; failures back off.
func (p *desktopPool) fill(ctx context.Context) {
	defer close(p.done)
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.refill:
		}
		for ctx.Err() == nil {
			p.mu.Lock()
			n := len(p.ready)
			p.mu.Unlock()
			if n >= p.size {
				break
			}
			id, err := p.start(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				p.log.Warn("could not start a warm desktop", "image", p.image, "err", err, "retry_in", backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Minute)
				continue
			}
			backoff = time.Second
			p.mu.Lock()
			p.ready = append(p.ready, id)
			p.mu.Unlock()
		}
	}
}

// start makes one member: its sandbox, its display and its desktop, and
// waits until the desktop is drawn.
func (p *desktopPool) start(ctx context.Context) (_ string, err error) {
	var r [8]byte
	_, _ = rand.Read(r[:])
	// Not the named result: a failed start returns "" and must still
	// remove what it made.
	id := warmDesktopPrefix + hex.EncodeToString(r[:])
	started := time.Now()
	p.mu.Lock()
	p.owned[id] = true
	p.mu.Unlock()
	if err := p.sandbox.CreateWarm(ctx, id, p.image); err != nil {
		p.disown(id)
		return "", err
	}
	defer func() {
		if err != nil {
			p.remove(id)
		}
	}()
	if _, err := p.display.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{
		SessionId: id, Width: int32(p.spec.Width), Height: int32(p.spec.Height), Depth: int32(p.spec.Depth), Dpi: int32(p.spec.DPI),
	}); err != nil {
		return "", err
	}
	if len(p.argv) > 0 {
		if err := p.sandbox.StartProgram(ctx, id, p.argv); err != nil {
			return "", err
		}
	}
	if err := p.waitDrawn(ctx, id); err != nil {
		return "", err
	}
	p.log.Info("warm desktop ready", "id", id, "image", p.image, "took", time.Since(started).Round(time.Millisecond))
	return id, nil
}

// drawnWait bounds the wait for a desktop to show a window: an image whose
// desktop opens none is taken as drawn after it.
const drawnWait = 30 * time.Second

// waitDrawn waits until the desktop has a window shown (the panel of the
// default image), the screen is not black, and it stayed the same for a
// few screenshots in a row: what a session's first screenshot would show.
func (p *desktopPool) waitDrawn(ctx context.Context, id string) error {
	deadline := time.Now().Add(drawnWait)
	var last []byte
	same := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		shot, err := p.display.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: id, Format: displayv1.ImageFormat_IMAGE_FORMAT_PNG})
		if err != nil {
			return err
		}
		data := shot.GetData()
		drawn := !session.MostlyDark(data)
		if drawn && time.Now().Before(deadline) {
			ws, err := p.display.ListWindows(ctx, &displayv1.ListWindowsRequest{SessionId: id})
			if err != nil {
				return err
			}
			shown := false
			for _, w := range ws.GetWindows() {
				shown = shown || w.GetMapped()
			}
			drawn = shown
		}
		if drawn && bytes.Equal(data, last) {
			same++
		} else {
			same = 0
		}
		last = data
		if same >= 3 {
			return nil
		}
		if time.Now().After(deadline.Add(drawnWait)) {
			return errors.New("the warm desktop never settled on a drawn screen")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(150 * time.Millisecond):
		}
	}
}

// readyCount is how many members are ready to be given.
func (p *desktopPool) readyCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// owns reports whether id is a member of the pool not given to a session:
// the node's reconcile leaves it alone.
func (p *desktopPool) owns(id string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.owned[id]
}

func (p *desktopPool) disown(id string) {
	p.mu.Lock()
	delete(p.owned, id)
	p.mu.Unlock()
}

// remove deletes a member's display and sandbox.
func (p *desktopPool) remove(id string) {
	defer p.disown(id)
	ctx, cancel := context.WithTimeout(auth.AsSystem(context.Background()), time.Minute)
	defer cancel()
	if _, err := p.display.DeleteDisplay(ctx, &displayv1.DeleteDisplayRequest{SessionId: id}); err != nil {
		p.log.Warn("remove a warm desktop's display", "id", id, "err", err)
	}
	if err := p.sandbox.DeleteWarm(ctx, id); err != nil {
		p.log.Warn("remove a warm desktop's sandbox", "id", id, "err", err)
	}
}

// Claim gives sessionID a ready member that fits (sandbox.WarmDesktops).
func (p *desktopPool) Claim(ctx context.Context, sessionID, tenant string, req *sandboxv1.CreateSandboxRequest, spec sandbox.DisplaySpec) bool {
	if spec != p.spec {
		return false
	}
	p.mu.Lock()
	if len(p.ready) == 0 || !p.sandbox.WarmFits(ctx, p.ready[0], tenant, req) {
		p.mu.Unlock()
		return false
	}
	id := p.ready[0]
	p.ready = p.ready[1:]
	delete(p.owned, id)
	p.mu.Unlock()
	select {
	case p.refill <- struct{}{}:
	default:
	}
	if err := p.sandbox.Rekey(ctx, id, sessionID, tenant); err != nil {
		p.log.WarnContext(ctx, "warm desktop unusable; starting one", "id", id, "session_id", sessionID, "err", err)
		go p.remove(id)
		return false
	}
	if err := p.display.Rekey(id, sessionID, tenant); err != nil {
		p.log.WarnContext(ctx, "warm desktop's display unusable; starting one", "id", id, "session_id", sessionID, "err", err)
		// The sandbox is the session's already: removed so that the
		// create makes its own.
		if derr := p.sandbox.DeleteWarm(context.WithoutCancel(ctx), sessionID); derr != nil {
			p.log.WarnContext(ctx, "remove a warm sandbox", "session_id", sessionID, "err", derr)
		}
		go p.remove(id)
		return false
	}
	p.log.InfoContext(ctx, "session given a warm desktop", "session_id", sessionID, "id", id)
	return true
}

// Close stops filling and removes the members not given to a session.
func (p *desktopPool) Close(ctx context.Context) error {
	p.cancel()
	if p.unobserve != nil {
		_ = p.unobserve()
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	ids := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, id := range ids {
		p.remove(id)
	}
	return nil
}
