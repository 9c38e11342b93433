package display

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
)

// Reconcile removes what an earlier process of this service left in
// RuntimeDir: for every session directory this Service did not create and
// keep rejects (nil keep rejects all), it kills the recorded X server if that
// pid is still an X server for the recorded display, and removes the
// display's socket, lock file and directory. It returns the sessions it
// removed.
//
// A display that keep accepts is left untouched. (X servers die with the
// process that started them, so after a crash there is normally nothing
// alive to keep; keep exists for displays started by a process that is still
// running, such as a second node agent sharing the directory during an
// upgrade.)
func (s *Service) Reconcile(ctx context.Context, keep func(sessionID string) bool) (removed []string, err error) {
	root := filepath.Join(s.cfg.RuntimeDir, "displays")
	ents, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("reconcile displays: %w", err)
	}
	var errs []error
	for _, ent := range ents {
		if !ent.IsDir() {
			continue
		}
		id := ent.Name()
		if keep != nil && keep(id) {
			continue
		}
		did, err := s.claimLeftover(ctx, id)
		if err != nil {
			errs = append(errs, err)
		}
		if did {
			removed = append(removed, id)
		}
	}
	if err := s.reconcilePool(ctx); err != nil {
		errs = append(errs, err)
	}
	sort.Strings(removed)
	if len(removed) > 0 {
		s.log.InfoContext(ctx, "reconciled displays", "removed", removed)
	}
	return removed, errors.Join(errs...)
}

// claimLeftover removes the leftovers of sessionID unless this Service runs
// a display for it. It holds the session's slot meanwhile, so a concurrent
// create cannot have its fresh files removed.
func (s *Service) claimLeftover(ctx context.Context, sessionID string) (bool, error) {
	s.mu.Lock()
	if _, ok := s.displays[sessionID]; ok {
		s.mu.Unlock()
		return false, nil
	}
	e := &entry{ready: make(chan struct{})}
	s.displays[sessionID] = e
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.displays, sessionID)
		s.mu.Unlock()
		close(e.ready)
	}()
	return s.removeLeftover(ctx, sessionID)
}

// removeLeftover kills and removes a display recorded in sessionID's
// directory. It reports whether there was anything to remove.
func (s *Service) removeLeftover(ctx context.Context, sessionID string) (bool, error) {
	dir := s.sessionDir(sessionID)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return true, s.removeDisplayDir(ctx, dir)
}

// removeDisplayDir kills the X server recorded in dir if it still runs,
// removes its socket and lock file, and then dir.
func (s *Service) removeDisplayDir(ctx context.Context, dir string) error {
	var errs []error
	if m, err := readMeta(dir); err == nil && m.Display > 0 {
		if err := xserver.Kill(ctx, m.PID, m.Display, s.cfg.StopTimeout); err != nil {
			errs = append(errs, err)
		}
		xserver.RemoveLeftoversOf(m.Display, m.PID)
		s.log.InfoContext(ctx, "removed leftover display", "session_id", m.SessionID,
			"x_display", fmt.Sprintf(":%d", m.Display), "pid", m.PID)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove leftover display dir: %w", err))
	}
	return errors.Join(errs...)
}

// reconcilePool removes warm displays an earlier process left; they belong
// to no session, so nothing keeps them.
func (s *Service) reconcilePool(ctx context.Context) error {
	ents, err := os.ReadDir(s.poolRoot())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("reconcile warm displays: %w", err)
	}
	var errs []error
	for _, ent := range ents {
		dir := filepath.Join(s.poolRoot(), ent.Name())
		if !ent.IsDir() || s.ownsPoolDir(dir) {
			continue
		}
		if err := s.removeDisplayDir(ctx, dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
