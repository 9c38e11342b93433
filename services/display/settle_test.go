package display

import (
	"context"
	"fmt"
	"image/color"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/capture"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// lateClient is an X program that answers a click late: delay after each
// button press it repaints its window in the next of colours, as a page
// load, a menu or an application's reply does.
func lateClient(t testing.TB, xc *xgb.Conn, x, y, w, h int, colours []uint32, delay *atomic.Int64) {
	t.Helper()
	wid := showWindow(t, xc, x, y, w, h, colours[0], xproto.EventMaskButtonPress)
	go func() {
		n := 0
		for {
			ev, err := xc.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			if _, ok := ev.(xproto.ButtonPressEvent); !ok {
				continue
			}
			n++
			c := colours[n%len(colours)]
			time.AfterFunc(time.Duration(delay.Load()), func() {
				xproto.ChangeWindowAttributes(xc, wid, xproto.CwBackPixel, []uint32{c})
				xproto.ClearArea(xc, false, wid, 0, 0, 0, 0)
				_, _ = xproto.GetInputFocus(xc).Reply()
			})
		}
	}()
}

// lateDisplay makes a 400x300 display id with a lateClient window at 50, 50
// (100x100) in the colours returned, painted before it returns; the delay
// returned is the window's, 0 at first.
func lateDisplay(t *testing.T, s *Service, c displayv1.DisplayServiceClient, id string) ([]uint32, *atomic.Int64) {
	t.Helper()
	createDisplay(t, c, id, 400, 300)
	colours := []uint32{0x0000ff, 0xff0000, 0x00ff00, 0xffff00}
	delay := new(atomic.Int64)
	xc := clientConn(t, s, id)
	mapped := time.Now()
	lateClient(t, xc, 50, 50, 100, 100, colours, delay)
	waitPainted(t, s, id, mapped, 50, 50, 100, 100)
	return colours, delay
}

// waitPainted waits until the display's watcher has seen the area x, y, w,
// h painted after since, so that a window's first paint, read late on a
// loaded machine, is not taken for the effect of the input that follows.
func waitPainted(t testing.TB, s *Service, id string, since time.Time, x, y, w, h int) {
	t.Helper()
	if all, ok := painted(t, s, id, since, x, y, w, h, 30*time.Second); !ok {
		t.Fatalf("the watcher never saw %v painted: %v", xproto.Rectangle{X: int16(x), Y: int16(y), Width: uint16(w), Height: uint16(h)}, all)
	}
}

// painted tells whether the display's watcher sees the area x, y, w, h
// painted after since within the time given, and the changes it saw.
func painted(t testing.TB, s *Service, id string, since time.Time, x, y, w, h int, within time.Duration) ([]capture.Change, bool) {
	t.Helper()
	d, err := s.get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(within)
	for {
		all, wake := d.watch.Snapshot()
		for _, ch := range all {
			if ch.At.After(since) && int(ch.Rect.X) <= x && int(ch.Rect.Y) <= y &&
				int(ch.Rect.X)+int(ch.Rect.Width) >= x+w && int(ch.Rect.Y)+int(ch.Rect.Height) >= y+h {
				return all, true
			}
		}
		select {
		case <-wake:
		case <-deadline:
			return all, false
		}
	}
}

// loaded are settle bounds for a loaded machine: the first damage after
// input may come seconds late there, and a frame may come hundreds of
// milliseconds after the one before; what is asserted stays the same.
var loaded = &displayv1.Settle{ChangeTimeout: durationpb.New(20 * time.Second), Timeout: durationpb.New(30 * time.Second)}

func rgb(c color.Color) uint32 {
	r, g, b, _ := c.RGBA()
	return (r>>8)<<16 | (g>>8)<<8 | b>>8
}

// A click whose effect arrives 0 to 500 ms late: every screenshot after the
// click shows the effect, and the response says the screen settled after
// changing.
func TestScreenshotShowsLateEffect(t *testing.T) {
	s, c := testService(t, "")
	colours, delay := lateDisplay(t, s, c, "late")
	clicks := 0
	for _, late := range []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond} {
		for try := range 3 {
			t.Run(fmt.Sprintf("%v/%d", late, try), func(t *testing.T) {
				delay.Store(int64(late))
				resp, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{
					SessionId:  "late",
					Actions:    []*displayv1.Action{{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: 100, Y: 100}}}}},
					Screenshot: true,
					Settle:     loaded,
				})
				if err != nil {
					t.Fatal(err)
				}
				clicks++
				want := colours[clicks%len(colours)]
				img := decodePNG(t, resp.GetScreenshot().GetData())
				if got := rgb(img.At(100, 100)); got != want {
					t.Fatalf("screenshot shows %06x, want %06x (the click's effect); settle %v", got, want, resp.GetSettle())
				}
				if resp.GetSettle().GetOutcome() != displayv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || resp.GetSettle().GetFirstChange().AsDuration() < late {
					t.Fatalf("settle = %v, want settled after the late change", resp.GetSettle())
				}
			})
		}
	}

	// A key that nothing answers changes nothing: said so after the change
	// bound. A late repaint of an earlier click may still land within the
	// bound, so a few tries are allowed; one must say NO_CHANGE.
	var resp *displayv1.PerformActionsResponse
	var err error
	for try := 0; ; try++ {
		resp, err = c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{
			SessionId:  "late",
			Actions:    []*displayv1.Action{{Action: &displayv1.Action_Key{Key: &displayv1.Key{Chord: "shift"}}}},
			Screenshot: true,
			Settle:     &displayv1.Settle{ChangeTimeout: durationpb.New(200 * time.Millisecond)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if o := resp.GetSettle().GetOutcome(); o == displayv1.SettleOutcome_SETTLE_OUTCOME_NO_CHANGE && resp.GetSettle().GetFirstChange() == nil {
			break
		}
		if try == 4 {
			t.Fatalf("key on nothing: settle %v", resp.GetSettle())
		}
	}
	// Asked not to wait, it does not: the screenshot shows the old colour.
	// The repaint comes seconds later, however slow the machine, and well
	// within the bounds a wait would have had.
	delay.Store(int64(5 * time.Second))
	resp, err = c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{
		SessionId:  "late",
		Actions:    []*displayv1.Action{{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: 100, Y: 100}}}}},
		Screenshot: true,
		Settle:     &displayv1.Settle{Skip: true, ChangeTimeout: loaded.GetChangeTimeout(), Timeout: loaded.GetTimeout()},
	})
	if err != nil {
		t.Fatal(err)
	}
	clicks++
	if o := resp.GetSettle().GetOutcome(); o != displayv1.SettleOutcome_SETTLE_OUTCOME_SKIPPED {
		t.Fatalf("skip: settle %v", resp.GetSettle())
	}
	if got := rgb(decodePNG(t, resp.GetScreenshot().GetData()).At(100, 100)); got != colours[(clicks-1)%len(colours)] {
		t.Fatalf("an unwaited screenshot shows %06x, want the colour before the click", got)
	}
	// The late repaint lands before the client's connection closes.
	testkit.Eventually(t, 30*time.Second, func() bool {
		shot, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "late", Format: displayv1.ImageFormat_IMAGE_FORMAT_PNG})
		return err == nil && rgb(decodePNG(t, shot.GetData()).At(100, 100)) == colours[clicks%len(colours)]
	}, "the late repaint")
}

// A screen that never stops changing where the input acted is reported
// busy once the bound passes, not waited on forever.
func TestSettleBusyScreenIsBounded(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "busy", 200, 200)
	xc := clientConn(t, s, "busy")
	mapped := time.Now()
	wid := showWindow(t, xc, 0, 0, 200, 200, 0, xproto.EventMaskButtonPress)
	waitPainted(t, s, "busy", mapped, 0, 0, 200, 200)
	go func() {
		// From the first click on, an animation at about 60 frames a second.
		for {
			ev, err := xc.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			if _, ok := ev.(xproto.ButtonPressEvent); ok {
				break
			}
		}
		for i := 0; ; i++ {
			xproto.ChangeWindowAttributes(xc, wid, xproto.CwBackPixel, []uint32{uint32(i*0x010203) & 0xffffff})
			xproto.ClearArea(xc, false, wid, 0, 0, 0, 0)
			if _, err := xproto.GetInputFocus(xc).Reply(); err != nil {
				return
			}
			time.Sleep(16 * time.Millisecond)
		}
	}()
	resp, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{
		SessionId:  "busy",
		Actions:    []*displayv1.Action{{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: 100, Y: 100}}}}},
		Screenshot: true,
		// The first frame may come seconds late on a loaded machine, and
		// a frame hundreds of milliseconds after the one before: a quiet of
		// a second is still far shorter than the bound, which a screen that
		// keeps changing must reach.
		Settle: &displayv1.Settle{ChangeTimeout: durationpb.New(10 * time.Second), Quiet: durationpb.New(time.Second), Timeout: durationpb.New(10 * time.Second)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetSettle(); st.GetOutcome() != displayv1.SettleOutcome_SETTLE_OUTCOME_BUSY || st.GetFirstChange() == nil {
		t.Fatalf("settle on an animating screen = %v, want busy", st)
	}
	// Bad settings are refused before any input.
	_, err = c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{
		SessionId: "busy", Actions: []*displayv1.Action{moveTo(1, 1)}, Screenshot: true,
		Settle: &displayv1.Settle{Quiet: durationpb.New(-time.Second)},
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative quiet: %v", err)
	}
}

// A paint that comes right after a damage event, while the display is
// still taking that damage, is seen as a change of its own: the screen's
// damage is reported as a growing box, so what is drawn inside the box
// already reported makes no event, and taking the damage must not drop
// it. Each round paints the whole window, waits until the watcher has seen
// that, then at once paints a corner of it.
func TestNoPaintIsLostAfterADamageEvent(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "lost", 200, 200)
	xc := clientConn(t, s, "lost")
	wid := showWindow(t, xc, 0, 0, 200, 200, 0x000000, 0)
	waitPainted(t, s, "lost", time.Time{}, 0, 0, 200, 200)
	paint := func(colour uint32, x, y, w, h int) {
		xproto.ChangeWindowAttributes(xc, wid, xproto.CwBackPixel, []uint32{colour})
		xproto.ClearArea(xc, false, wid, int16(x), int16(y), uint16(w), uint16(h))
		_, _ = xproto.GetInputFocus(xc).Reply()
	}
	seen := func(since time.Time, x, y, w, h int, within time.Duration) bool {
		_, ok := painted(t, s, "lost", since, x, y, w, h, within)
		return ok
	}
	for i := range 200 {
		start := time.Now()
		paint(uint32(0x010101*(i%200)+1), 0, 0, 200, 200)
		if !seen(start, 0, 0, 200, 200, 30*time.Second) {
			t.Fatalf("round %d: the whole window's paint was never seen", i)
		}
		corner := time.Now()
		paint(uint32(0xff0000-i), 10, 10, 20, 20)
		if !seen(corner, 10, 10, 20, 20, 5*time.Second) {
			t.Fatalf("round %d: the corner painted right after the watcher saw the window's paint was never seen", i)
		}
	}
}

// A click answered by two paints, the second after the screen was quiet for
// more than half the quiet period (when a screenshot is taken ahead) but
// less than all of it: every answer shows the second paint, not the
// screenshot taken ahead between the two.
func TestScreenshotAheadOfTheLastChangeIsNotUsed(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "twostep", 400, 300)
	xc := clientConn(t, s, "twostep")
	mapped := time.Now()
	wid := showWindow(t, xc, 50, 50, 100, 100, 0x0000ff, xproto.EventMaskButtonPress)
	waitPainted(t, s, "twostep", mapped, 50, 50, 100, 100)
	const quiet = 400 * time.Millisecond
	paint := func(c uint32) {
		xproto.ChangeWindowAttributes(xc, wid, xproto.CwBackPixel, []uint32{c})
		xproto.ClearArea(xc, false, wid, 0, 0, 0, 0)
		_, _ = xproto.GetInputFocus(xc).Reply()
	}
	go func() {
		n := uint32(0)
		for {
			ev, err := xc.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			if _, ok := ev.(xproto.ButtonPressEvent); !ok {
				continue
			}
			n++
			paint(0xff0000 + n) // the first step
			final := 0x00ff00 + n
			time.AfterFunc(quiet*3/4, func() { paint(final) })
		}
	}()
	for n := uint32(1); n <= 3; n++ {
		resp, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{
			SessionId:  "twostep",
			Actions:    []*displayv1.Action{{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: 100, Y: 100}}}}},
			Screenshot: true,
			Settle:     &displayv1.Settle{ChangeTimeout: loaded.GetChangeTimeout(), Timeout: loaded.GetTimeout(), Quiet: durationpb.New(quiet)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := rgb(decodePNG(t, resp.GetScreenshot().GetData()).At(100, 100)); got != 0x00ff00+n {
			t.Fatalf("click %d: the screenshot shows %06x, want the second paint %06x; settle %v", n, got, 0x00ff00+n, resp.GetSettle())
		}
	}
}

// A screenshot taken ahead is not the answer when the screen changed after
// it: a click answered by a paint, then after the screen has been quiet
// long enough for a screenshot to be taken ahead, a second paint, and the
// wait bounded before the quiet period after that second paint is over
// (Busy): the answer shows the second paint.
func TestScreenshotAheadIsNotUsedAfterALaterChange(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "stale", 400, 300)
	xc := clientConn(t, s, "stale")
	mapped := time.Now()
	wid := showWindow(t, xc, 50, 50, 100, 100, 0x0000ff, xproto.EventMaskButtonPress)
	waitPainted(t, s, "stale", mapped, 50, 50, 100, 100)
	paint := func(c uint32) {
		xproto.ChangeWindowAttributes(xc, wid, xproto.CwBackPixel, []uint32{c})
		xproto.ClearArea(xc, false, wid, 0, 0, 0, 0)
		_, _ = xproto.GetInputFocus(xc).Reply()
	}
	// Quiet 2 s: a screenshot is taken ahead 1 s after the first paint; the
	// second comes at 1.5 s; the wait ends at 2 s, before the next one
	// ahead (2.5 s).
	go func() {
		for {
			ev, err := xc.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			if _, ok := ev.(xproto.ButtonPressEvent); ok {
				paint(0xff0000)
				time.AfterFunc(1500*time.Millisecond, func() { paint(0x00ff00) })
			}
		}
	}()
	resp, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{
		SessionId:  "stale",
		Actions:    []*displayv1.Action{{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: 100, Y: 100}}}}},
		Screenshot: true,
		Settle:     &displayv1.Settle{ChangeTimeout: durationpb.New(2 * time.Second), Timeout: durationpb.New(2 * time.Second), Quiet: durationpb.New(2 * time.Second)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rgb(decodePNG(t, resp.GetScreenshot().GetData()).At(100, 100)); got != 0x00ff00 {
		t.Fatalf("the screenshot shows %06x, want the second paint 00ff00; settle %v", got, resp.GetSettle())
	}
}

// Another client's input on the display (xdotool in the session, a test
// harness) is input too: its clicks' repaints are not the screen's own
// blinking, and the agent's next click there is seen to change it at once,
// not after the change bound.
func TestOtherClientsInputIsNotBackground(t *testing.T) {
	if _, err := exec.LookPath("xdotool"); err != nil {
		t.Fatal("xdotool is required (Debian package xdotool)")
	}
	s, c := testService(t, "")
	colours, _ := lateDisplay(t, s, c, "xdo")
	xd, xauth, _ := s.Lookup("xdo")
	for range 3 {
		since := time.Now()
		cmd := exec.Command("xdotool", "mousemove", "100", "100", "click", "1")
		cmd.Env = []string{"DISPLAY=" + xd, "XAUTHORITY=" + xauth}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("xdotool: %v: %s", err, out)
		}
		waitPainted(t, s, "xdo", since, 50, 50, 100, 100)
	}
	fourthClickSettles(t, c, "xdo", colours)
}

// fourthClickSettles clicks lateDisplay's window through the API after
// three clicks made another way, and checks that the settle took the
// click's repaint for its effect (not for the screen's own blinking) and
// the screenshot shows the fourth colour.
func fourthClickSettles(t *testing.T, c displayv1.DisplayServiceClient, id string, colours []uint32) {
	t.Helper()
	resp, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{
		SessionId:  id,
		Actions:    []*displayv1.Action{{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: 100, Y: 100}}}}},
		Screenshot: true,
		Settle:     loaded,
	})
	if err != nil {
		t.Fatal(err)
	}
	if o := resp.GetSettle().GetOutcome(); o != displayv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("settle %v after three clicks made another way, want settled on the click's repaint", resp.GetSettle())
	}
	if got := rgb(decodePNG(t, resp.GetScreenshot().GetData()).At(100, 100)); got != colours[0] {
		t.Fatalf("screenshot shows %06x, want %06x (the fourth click's colour)", got, colours[0])
	}
}
