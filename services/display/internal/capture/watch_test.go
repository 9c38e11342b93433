package capture

import (
	"context"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"
)

// A change early in a long input (a click's repaint before the text typed
// after it is drawn) does not end the wait: the screen must also stay quiet
// for the quiet period after the input has ended.
func TestSettleQuietCountsFromTheEndOfInput(t *testing.T) {
	w := &Watcher{last: time.Now(), wake: make(chan struct{})}
	done := time.Now()
	began := done.Add(-30 * time.Millisecond)
	w.note(Change{At: began.Add(time.Millisecond), Rect: xproto.Rectangle{X: 10, Y: 10, Width: 100, Height: 20}})
	o := SettleOptions{ChangeTimeout: time.Second, Quiet: 40 * time.Millisecond, MaxQuiet: 500 * time.Millisecond, Timeout: 3 * time.Second}
	rep, err := w.Settle(context.Background(), began, done, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != Settled || rep.Waited < o.Quiet {
		t.Fatalf("settle = %+v, want settled no sooner than %v after the end of the input", rep, o.Quiet)
	}
}
