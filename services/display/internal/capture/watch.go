package capture

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/screensaver"
	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
)

// Watcher learns from the DAMAGE extension when and where the screen
// changed, so a screenshot after input can wait for the input's effect
// instead of for a fixed time.
type Watcher struct {
	c   *xgb.Conn
	dmg damage.Damage
	// parts receives the damage each Handle takes from dmg.
	parts xfixes.Region

	mu   sync.Mutex
	last time.Time
	// recent changes, oldest first, kept for historyFor.
	recent []Change
	// wake is closed, and replaced, at every change.
	wake chan struct{}
	// waits are the spans of recent settle waits and of the second after
	// input that came another way (NoteInput): changes in them may be the
	// effect of input, never what the screen does by itself.
	waits [][2]time.Time

	// root and idle (the X server has MIT-SCREEN-SAVER): input from any
	// client (xdotool in the session, a test harness) is learnt from the
	// server's time since the last input, read at each change.
	root xproto.Window
	idle bool
	// own are the spans in which deskgrid's own input was sent (an open
	// one ends at the zero time); seen is the latest other input noted.
	own  [][2]time.Time
	seen time.Time
}

// Change is one report of damage: when, and the bounding box of what changed.
type Change struct {
	At   time.Time
	Rect xproto.Rectangle
}

const (
	// historyFor is how long changes are remembered: long enough to see a
	// cursor blinking or a clock ticking three times.
	historyFor = 3 * time.Second
	maxHistory = 1024
)

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
	// BoundingBox: an event with the damaged area's bounding box whenever
	// it grows; Handle empties the region again, so each event is new damage.
	if err := damage.CreateChecked(c, id, xproto.Drawable(root), damage.ReportLevelBoundingBox).Check(); err != nil {
		return nil, fmt.Errorf("create damage: %w", err)
	}
	parts, err := newRegion(c)
	if err != nil {
		return nil, err
	}
	c.ExtLock.RLock()
	_, idle := c.Extensions["MIT-SCREEN-SAVER"]
	c.ExtLock.RUnlock()
	return &Watcher{c: c, dmg: id, parts: parts, last: time.Now(), wake: make(chan struct{}), root: root, idle: idle}, nil
}

// Handle records ev if it is a damage event and reports whether it was.
func (w *Watcher) Handle(ev xgb.Event) bool {
	n, ok := ev.(damage.NotifyEvent)
	if !ok {
		return false
	}
	// The damage is taken into parts and read back: what was drawn after
	// the event was sent and before the server takes the damage lies
	// within the box already reported, so it made no event of its own (a
	// bounding box reports only growth) and would be lost. Read now, it is
	// a change seen now.
	damage.Subtract(w.c, w.dmg, 0, w.parts)
	area := n.Area
	if w.parts != 0 {
		if r, err := xfixes.FetchRegion(w.c, w.parts).Reply(); err == nil && r.Extents.Width > 0 && r.Extents.Height > 0 {
			area = union(area, r.Extents)
		}
	}
	now := time.Now()
	w.note(Change{At: now, Rect: area})
	w.noteOtherInput(now)
	return true
}

// otherInputSlack is how far after deskgrid's own input the server may
// say the latest input was and still mean that one: its time is read in
// whole milliseconds, a round trip after the fact.
const otherInputSlack = 20 * time.Millisecond

// noteOtherInput asks the X server when the latest input came, of any
// client and device (XTEST's included), and notes it as input (NoteInput)
// unless it was deskgrid's own: a change that follows xdotool clicking in
// the session is its effect, not the screen's own blinking.
func (w *Watcher) noteOtherInput(now time.Time) {
	if !w.idle {
		return
	}
	r, err := screensaver.QueryInfo(w.c, xproto.Drawable(w.root)).Reply()
	if err != nil {
		return
	}
	at := now.Add(-time.Duration(r.MsSinceUserInput) * time.Millisecond)
	if now.Sub(at) > historyFor {
		return
	}
	w.mu.Lock()
	fresh := at.Sub(w.seen) > time.Millisecond
	for _, o := range w.own {
		if !at.Before(o[0].Add(-otherInputSlack)) && (o[1].IsZero() || !at.After(o[1].Add(otherInputSlack))) {
			fresh = false
		}
	}
	if fresh {
		w.seen = at
	}
	w.mu.Unlock()
	if fresh {
		w.NoteInput(at)
	}
}

// OwnInput marks deskgrid's own input, sent from at on, until the returned
// func is first called: the server's latest input in that span is not
// another client's.
func (w *Watcher) OwnInput(at time.Time) (done func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	drop := 0
	for drop < len(w.own) && !w.own[drop][1].IsZero() && at.Sub(w.own[drop][1]) > historyFor {
		drop++
	}
	w.own = append(w.own[drop:], [2]time.Time{at, {}})
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for i := range w.own {
			if w.own[i][0].Equal(at) && w.own[i][1].IsZero() {
				w.own[i][1] = time.Now()
			}
		}
	}
}

// newRegion makes the region damage is taken into; 0 (damage is dropped
// instead) on an X server without XFIXES 2.
func newRegion(c *xgb.Conn) (xfixes.Region, error) {
	c.ExtLock.RLock()
	_, ok := c.Extensions["XFIXES"]
	c.ExtLock.RUnlock()
	if !ok {
		return 0, nil
	}
	if v, err := xfixes.QueryVersion(c, 4, 0).Reply(); err != nil || v.MajorVersion < 2 {
		return 0, nil
	}
	parts, err := xfixes.NewRegionId(c)
	if err != nil {
		return 0, err
	}
	if err := xfixes.CreateRegionChecked(c, parts, nil).Check(); err != nil {
		return 0, fmt.Errorf("create damage region: %w", err)
	}
	return parts, nil
}

// union is the bounding box of two rectangles.
func union(a, b xproto.Rectangle) xproto.Rectangle {
	x0, y0 := min(int(a.X), int(b.X)), min(int(a.Y), int(b.Y))
	x1 := max(int(a.X)+int(a.Width), int(b.X)+int(b.Width))
	y1 := max(int(a.Y)+int(a.Height), int(b.Y)+int(b.Height))
	return xproto.Rectangle{X: int16(x0), Y: int16(y0), Width: uint16(x1 - x0), Height: uint16(y1 - y0)}
}

func (w *Watcher) note(ch Change) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = ch.At
	drop := 0
	for drop < len(w.recent) && (ch.At.Sub(w.recent[drop].At) > historyFor || len(w.recent)-drop >= maxHistory) {
		drop++
	}
	w.recent = append(w.recent[drop:], ch)
	close(w.wake)
	w.wake = make(chan struct{})
}

// LastChange is when the screen last changed, as far as the events read so
// far tell.
func (w *Watcher) LastChange() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// Latest returns when the screen last changed and a channel closed at the
// next change.
func (w *Watcher) Latest() (time.Time, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.wake
}

// snapshot returns the remembered changes and a channel closed at the next.
func (w *Watcher) Snapshot() ([]Change, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Change(nil), w.recent...), w.wake
}

// SettleOptions bound a wait for the effect of input.
type SettleOptions struct {
	// ChangeTimeout: how long to wait for the first change.
	ChangeTimeout time.Duration
	// Quiet: how long the screen must stay unchanged after a change;
	// MaxQuiet caps it when the screen draws frames further apart.
	Quiet, MaxQuiet time.Duration
	// Timeout bounds the whole wait.
	Timeout time.Duration
}

// inputEffect is how long after input that came another way the screen's
// changes may be its effect.
const inputEffect = time.Second

// NoteInput records input that reached the screen another way than through
// Settle's caller, such as a VNC viewer's key or pointer: what changes in the
// second after it may be its effect, never what the screen does by itself,
// so a field a person typed in is not taken for a blinking cursor.
func (w *Watcher) NoteInput(at time.Time) {
	w.addWait(at, at.Add(inputEffect))
}

// addWait remembers the span from to until as one in which changes may be
// the effect of input, forgetting spans older than the history and joining
// one that overlaps the latest.
func (w *Watcher) addWait(from, until time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.waits); n > 0 && !from.Before(w.waits[n-1][0]) && !from.After(w.waits[n-1][1]) {
		if until.After(w.waits[n-1][1]) {
			w.waits[n-1][1] = until
		}
		return
	}
	drop := 0
	for drop < len(w.waits) && from.Sub(w.waits[drop][1]) > historyFor {
		drop++
	}
	w.waits = append(w.waits[drop:], [2]time.Time{from, until})
}

// Outcome is how a wait ended.
type Outcome int

const (
	// Settled: the screen changed, then stayed quiet.
	Settled Outcome = iota + 1
	// Busy: the screen changed and kept changing until the bound.
	Busy
	// NoChange: nothing changed within ChangeTimeout.
	NoChange
)

// SettleReport says how a wait ended: FirstChange is from the start of the
// input to the first change it caused (0 when none), Waited from the end of
// the input to the return.
type SettleReport struct {
	Outcome     Outcome
	FirstChange time.Duration
	Waited      time.Duration
}

// Settle waits for the effect of input that began at began and ended at
// done: for the first change of the screen after began (a program may answer
// a button's press before the input has ended, and its repaint may be read
// before the end is known) that is not one it was already repeating before the
// input (a blinking cursor, a ticking clock: an area that changed at least
// three times in the seconds before), then until the screen stays quiet after
// both its latest change and the end of the input. Quiet stretches to twice
// the interval between the latest changes when the screen draws frames
// further apart than half of it, so a slow animation or a page painting in
// steps is waited for, up to MaxQuiet.
func (w *Watcher) Settle(ctx context.Context, began, done time.Time, o SettleOptions) (SettleReport, error) {
	since := began
	all, _ := w.Snapshot()
	w.mu.Lock()
	waits := slices.Clone(w.waits)
	w.mu.Unlock()
	background := repeating(all, since, waits)
	defer func() { w.addWait(since, time.Now()) }()
	deadline := done.Add(o.Timeout)
	changeBy := done.Add(min(o.ChangeTimeout, o.Timeout))
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		all, wake := w.Snapshot()
		var caused []time.Time
		for _, ch := range all {
			if ch.At.After(since) && !within(ch.Rect, background) {
				caused = append(caused, ch.At)
			}
		}
		now := time.Now()
		rep := SettleReport{Waited: now.Sub(done)}
		var until time.Time
		if len(caused) == 0 {
			if !now.Before(changeBy) {
				rep.Outcome = NoChange
				return rep, nil
			}
			until = changeBy
		} else {
			rep.FirstChange = caused[0].Sub(since)
			// Quiet is counted from the end of the input too: a change
			// early in a long input (a click before typing) is not its
			// whole effect.
			last := caused[len(caused)-1]
			ready := later(last, done).Add(quietFor(caused, o.Quiet, o.MaxQuiet))
			switch {
			case !now.Before(ready):
				rep.Outcome = Settled
				return rep, nil
			case !now.Before(deadline):
				rep.Outcome = Busy
				return rep, nil
			}
			until = ready
			if deadline.Before(until) {
				until = deadline
			}
		}
		t.Reset(until.Sub(now))
		select {
		case <-t.C:
		case <-wake:
			if !t.Stop() {
				<-t.C
			}
		case <-ctx.Done():
			return SettleReport{}, ctx.Err()
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// quietFor is how long to wait after the latest of changes: quiet, or twice
// the longest of the last few intervals between changes when that is longer,
// capped at maxQuiet.
func quietFor(changes []time.Time, quiet, maxQuiet time.Duration) time.Duration {
	var frame time.Duration
	for i := max(1, len(changes)-3); i < len(changes); i++ {
		frame = max(frame, changes[i].Sub(changes[i-1]))
	}
	return max(quiet, min(2*frame, maxQuiet))
}

// repeatApart is how far apart changes of an area must be to count as
// repeats: a blinking cursor or a ticking clock changes every half second or
// second, while a page that painted the last frames of an earlier click's
// effect after its settle ended did so within a few frames.
const repeatApart = 200 * time.Millisecond

// repeating returns the areas that changed three times or more, at least
// repeatApart apart, in the history before since, outside the waits after
// earlier input: what the screen does by itself.
func repeating(all []Change, since time.Time, waits [][2]time.Time) []xproto.Rectangle {
	var before []Change
next:
	for _, ch := range all {
		if ch.At.After(since) || since.Sub(ch.At) > historyFor {
			continue
		}
		for _, w := range waits {
			if !ch.At.Before(w[0]) && !ch.At.After(w[1]) {
				continue next
			}
		}
		before = append(before, ch)
	}
	var out []xproto.Rectangle
	for _, a := range before {
		n := 0
		var prev time.Time
		for _, b := range before {
			// The same area again (b within a, at least half its size): a
			// large repaint once does not make the small changes under it
			// repeat. Changes closer together than repeatApart are one
			// repaint drawn in parts (a page's frames as it loads).
			if contains(a.Rect, b.Rect) && 2*area(b.Rect) >= area(a.Rect) && (n == 0 || b.At.Sub(prev) >= repeatApart) {
				n++
				prev = b.At
			}
		}
		if n >= 3 && !within(a.Rect, out) {
			out = append(out, a.Rect)
		}
	}
	return out
}

func within(r xproto.Rectangle, areas []xproto.Rectangle) bool {
	for _, a := range areas {
		if contains(a, r) {
			return true
		}
	}
	return false
}

// contains reports whether outer contains inner.
func contains(outer, inner xproto.Rectangle) bool {
	return int(inner.X) >= int(outer.X) && int(inner.Y) >= int(outer.Y) &&
		int(inner.X)+int(inner.Width) <= int(outer.X)+int(outer.Width) &&
		int(inner.Y)+int(inner.Height) <= int(outer.Y)+int(outer.Height)
}

func area(r xproto.Rectangle) int { return int(r.Width) * int(r.Height) }
