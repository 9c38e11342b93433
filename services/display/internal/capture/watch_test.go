package capture

import (
	"context"
	"slices"
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

// What the screen does by itself repeats over time; the frames of one
// repaint, however many, are one change.
func TestRepeating(t *testing.T) {
	caret := xproto.Rectangle{X: 400, Y: 120, Width: 2, Height: 20}
	page := xproto.Rectangle{Width: 1280, Height: 800}
	since := time.Now()
	at := func(ms int, r xproto.Rectangle) Change {
		return Change{At: since.Add(time.Duration(ms-3000) * time.Millisecond), Rect: r}
	}
	for _, tc := range []struct {
		name    string
		changes []Change
		want    []xproto.Rectangle
	}{
		{"caret blinking", []Change{at(1000, caret), at(1530, caret), at(2060, caret), at(2590, caret)}, []xproto.Rectangle{caret}},
		{"twice", []Change{at(1000, caret), at(1530, caret)}, nil},
		{"a page's late frames, twice", []Change{at(1046, page), at(1061, page), at(1073, page), at(2352, page), at(2367, page)}, nil},
		{"a page's frames three times", []Change{at(200, page), at(215, page), at(1046, page), at(1061, page), at(2352, page)}, []xproto.Rectangle{page}},
		{"an animation", []Change{at(0, caret), at(16, caret), at(33, caret), at(50, caret), at(250, caret), at(266, caret), at(500, caret)}, []xproto.Rectangle{caret}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := repeating(tc.changes, since, nil); !slices.Equal(got, tc.want) {
				t.Fatalf("repeating = %v, want %v", got, tc.want)
			}
		})
	}
}
