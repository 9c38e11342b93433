package display

import (
	"context"
	"fmt"
	"sort"
)

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
