package capture

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/xproto"
)

// Watcher learns from the DAMAGE extension when the screen last changed, so
// a screenshot after input can wait for the screen to settle instead of for
// a fixed time.
type Watcher struct {
	c   *xgb.Conn
	dmg damage.Damage

	mu   sync.Mutex
	last time.Time
}

// Watch starts reporting changes of root on a connection from xconn.Dial.
// The caller feeds the connection's events to Handle.
func Watch(c *xgb.Conn, root xproto.Window) (*Watcher, error) {
	// The extension itself is set up by xconn.Dial.
	if _, err := damage.QueryVersion(c, 1, 1).Reply(); err != nil {
		return nil, fmt.Errorf("DAMAGE version: %w", err)
	}
	id, err := damage.NewDamageId(c)
	if err != nil {
		return nil, err
	}
	// NonEmpty: one event when the damage region stops being empty; Handle
	// empties it again. That is all a "has anything changed" needs.
	if err := damage.CreateChecked(c, id, xproto.Drawable(root), damage.ReportLevelNonEmpty).Check(); err != nil {
		return nil, fmt.Errorf("create damage: %w", err)
	}
	return &Watcher{c: c, dmg: id, last: time.Now()}, nil
}

// Handle records ev if it is a damage event and reports whether it was.
func (w *Watcher) Handle(ev xgb.Event) bool {
	if _, ok := ev.(damage.NotifyEvent); !ok {
		return false
	}
	w.mu.Lock()
	w.last = time.Now()
	w.mu.Unlock()
	damage.Subtract(w.c, w.dmg, 0, 0)
	return true
}

// LastChange is when the screen last changed, as far as the events read so
// far tell.
func (w *Watcher) LastChange() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// WaitSettled returns once the screen has not changed for quiet since
// since, or when timeout has passed; it reports whether it settled.
func (w *Watcher) WaitSettled(ctx context.Context, since time.Time, quiet, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for {
		ref := w.LastChange()
		if ref.Before(since) {
			ref = since
		}
		now := time.Now()
		ready := ref.Add(quiet)
		if !now.Before(ready) {
			return true, nil
		}
		if !now.Before(deadline) {
			return false, nil
		}
		if ready.After(deadline) {
			ready = deadline
		}
		t.Reset(ready.Sub(now))
		select {
		case <-t.C:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}
