package display

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// warmPool holds X servers started ahead of demand at the default size.
type warmPool struct {
	ready  chan *display
	refill chan struct{}
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// dirs are the pool directories this Service owns, ready or starting,
	// so Reconcile leaves them alone.
	dirs map[string]bool
}

const poolDirName = "display-pool"

func (s *Service) poolRoot() string { return filepath.Join(s.cfg.RuntimeDir, poolDirName) }

func (s *Service) warmSpec() displaySpec {
	return displaySpec{width: s.cfg.DefaultWidth, height: s.cfg.DefaultHeight, depth: 24}
}

func (s *Service) startPool() {
	p := &s.pool
	p.ready = make(chan *display, s.cfg.WarmDisplays)
	p.refill = make(chan struct{}, 1)
	p.done = make(chan struct{})
	p.dirs = make(map[string]bool)
	if s.cfg.WarmDisplays == 0 {
		close(p.done)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.refill <- struct{}{}
	go s.fillPool(ctx)
}

// fillPool keeps the pool full until ctx ends. Failures back off, so a
// machine without a working X server is not hammered.
func (s *Service) fillPool(ctx context.Context) {
	defer close(s.pool.done)
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.pool.refill:
		}
		for len(s.pool.ready) < cap(s.pool.ready) && ctx.Err() == nil {
			d, err := s.startWarm(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("could not start a warm display", "err", err, "retry_in", backoff)
				if sleep(ctx, backoff) != nil {
					return
				}
				backoff = min(2*backoff, 30*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			s.pool.ready <- d
		}
	}
}

func (s *Service) startWarm(ctx context.Context) (*display, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(s.poolRoot(), hex.EncodeToString(b[:]))
	s.pool.mu.Lock()
	s.pool.dirs[dir] = true
	s.pool.mu.Unlock()
	if err := os.MkdirAll(s.poolRoot(), 0o700); err != nil {
		return nil, fmt.Errorf("create display pool dir: %w", err)
	}
	d, err := s.launch(ctx, dir, s.warmSpec())
	if err != nil {
		s.forgetPoolDir(dir)
		return nil, err
	}
	return d, nil
}

func (s *Service) forgetPoolDir(dir string) {
	s.pool.mu.Lock()
	delete(s.pool.dirs, dir)
	s.pool.mu.Unlock()
}

// takeWarm hands a warm display to spec's session if one matches, moving
// its files into the session's directory. It returns nil when the caller
// must start a display itself.
func (s *Service) takeWarm(ctx context.Context, spec displaySpec) *display {
	w := s.warmSpec()
	if spec.width != w.width || spec.height != w.height || spec.depth != w.depth || spec.dpi != w.dpi {
		return nil
	}
	for {
		var d *display
		select {
		case d = <-s.pool.ready:
		default:
			return nil
		}
		select {
		case s.pool.refill <- struct{}{}:
		default:
		}
		if err := s.adopt(d, spec.sessionID, spec.tenant); err != nil {
			s.log.WarnContext(ctx, "warm display unusable; trying another", "err", err)
			_ = s.stop(context.Background(), d)
			continue
		}
		return d
	}
}

// adopt gives a warm display to sessionID, owned by tenant.
func (s *Service) adopt(d *display, sessionID, tenant string) error {
	if err := d.usable(); err != nil {
		return err
	}
	poolDir := d.dir
	dir := s.sessionDir(sessionID)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear session dir: %w", err)
	}
	if err := os.Rename(poolDir, dir); err != nil {
		return fmt.Errorf("move warm display: %w", err)
	}
	s.forgetPoolDir(poolDir)
	d.sessionID, d.tenant, d.dir, d.xauthPath = sessionID, tenant, dir, filepath.Join(dir, xauthFile)
	d.created = time.Now().UTC()
	d.setOwner(sessionID)
	return writeMeta(dir, d.meta())
}

// stopPool stops filling and stops every warm display.
func (s *Service) stopPool(ctx context.Context) error {
	if s.pool.cancel != nil {
		s.pool.cancel()
	}
	<-s.pool.done
	var errs []error
	for {
		select {
		case d := <-s.pool.ready:
			if err := s.stop(ctx, d); err != nil {
				errs = append(errs, err)
			}
			s.forgetPoolDir(d.dir)
		default:
			return errors.Join(errs...)
		}
	}
}

// ownsPoolDir reports whether dir is one of this Service's warm displays.
func (s *Service) ownsPoolDir(dir string) bool {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return s.pool.dirs[dir]
}

// Rekey gives the running display of session from, made for no tenant and
// used by nobody (a desktop started ahead of its session), to session to,
// owned by tenant. Its X server, cookie and the programs on it stay.
func (s *Service) Rekey(from, to, tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	e := s.displays[from]
	if e == nil {
		return fmt.Errorf("no display %q to give to session %s", from, to)
	}
	select {
	case <-e.ready:
	default:
		return fmt.Errorf("display %q is still starting", from)
	}
	if e.d == nil || e.tenant != "" {
		return fmt.Errorf("display %q cannot be given to another session", from)
	}
	if _, ok := s.displays[to]; ok {
		return fmt.Errorf("session %s already has a display: %w", to, errAlreadyExists)
	}
	d := e.d
	if err := d.usable(); err != nil {
		return err
	}
	dir := s.sessionDir(to)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear session dir: %w", err)
	}
	if err := os.Rename(d.dir, dir); err != nil {
		return fmt.Errorf("move display to its session: %w", err)
	}
	d.sessionID, d.tenant, d.dir, d.xauthPath = to, tenant, dir, filepath.Join(dir, xauthFile)
	d.created = time.Now().UTC()
	d.setOwner(to)
	e.tenant = tenant
	delete(s.displays, from)
	s.displays[to] = e
	return writeMeta(dir, d.meta())
}
