package display

import (
	"context"
	"fmt"
)

// fence admits input by lease fencing token, the way a store guards against
// a writer whose lock expired: tokens only grow, so a caller holding an
// older token than one already seen has lost its lease. While a lease is
// held (a token seen and not released), input without one is refused too.
// Callers hold inputMu.
func (d *display) fence(token int64) error {
	switch {
	case token == 0 && !d.leaseHeld:
		return nil
	case token == 0:
		return fmt.Errorf("input to session %s is leased; pass the lease token: %w", d.sessionID, errStaleLease)
	case token < d.leaseToken:
		return fmt.Errorf("input lease token %d is older than %d: the lease has passed to another holder: %w", token, d.leaseToken, errStaleLease)
	}
	d.leaseToken, d.leaseHeld = token, true
	return nil
}

// release marks the lease of token given up, when it is the newest seen:
// input without a token is accepted again, older tokens stay refused.
// Callers hold inputMu.
func (d *display) release(token int64) {
	if token >= d.leaseToken {
		d.leaseToken, d.leaseHeld = token, false
	}
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
