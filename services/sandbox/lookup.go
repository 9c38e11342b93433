package sandbox

import (
	"context"
)

// lookup returns a ready sandbox. It is the one place a session's sandbox
// is found for a caller: another tenant's is reported missing exactly as
// an unknown one, so the answer tells nothing of whether it exists.
func (s *Service) lookup(ctx context.Context, id string) (*box, error) {
	if err := validateSessionID(id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b == nil || !s.tenancy.Sees(ctx, b.tenant) {
		return nil, failf(errNoSandbox, "session %q has no sandbox on this node", id)
	}
	<-b.ready // creation is bounded by its own mount call
	if !b.ok {
		return nil, failf(errNoSandbox, "session %q has no sandbox on this node", id)
	}
	return b, nil
}

// acquire returns a ready sandbox that will not be unmounted before release
// is called.
func (s *Service) acquire(ctx context.Context, id string) (*box, func(), error) {
	b, err := s.lookup(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	if b.deleting || s.boxes[id] != b {
		s.mu.Unlock()
		return nil, nil, failf(errNoSandbox, "session %q's sandbox is being deleted", id)
	}
	b.users.Add(1)
	s.mu.Unlock()
	// Waits out a DiscardChanges or RestoreSnapshot remounting the layer.
	b.layer.RLock()
	return b, func() { b.layer.RUnlock(); b.users.Done() }, nil
}

// list returns the ready sandboxes the caller may see.
func (s *Service) list(ctx context.Context) []*box {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		if !s.tenancy.Sees(ctx, b.tenant) {
			continue
		}
		select {
		case <-b.ready:
			if b.ok && !b.deleting && !b.warm {
				out = append(out, b)
			}
		default:
		}
	}
	return out
}
