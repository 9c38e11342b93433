package display

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/errinfo"
	"github.com/deskgrid/deskgrid/services/platform/keysym"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// inputWindow is a full-screen window of a client on the display that
// records the input it receives, as an application would.
type inputWindow struct {
	c      *xgb.Conn
	win    xproto.Window
	events chan xgb.Event
	min    xproto.Keycode
	per    int
	syms   []xproto.Keysym
	// remaps counts the keyboard mapping changes the client was told of.
	remaps int
}

func newInputWindow(t *testing.T, s *Service, sessionID string, w, h int) *inputWindow {
	t.Helper()
	c := clientConn(t, s, sessionID)
	mask := uint32(xproto.EventMaskKeyPress | xproto.EventMaskKeyRelease | xproto.EventMaskButtonPress |
		xproto.EventMaskButtonRelease | xproto.EventMaskPointerMotion | xproto.EventMaskExposure)
	iw := &inputWindow{c: c, events: make(chan xgb.Event, 10000)}
	iw.win = showWindow(t, c, 0, 0, w, h, 0x202020, mask)
	iw.loadKeymap(t)
	// Wait until the window is viewable, then give it the keyboard.
	iw.next(t, "expose", func(ev xgb.Event) bool { _, ok := ev.(xproto.ExposeEvent); return ok })
	if err := xproto.SetInputFocusChecked(c, xproto.InputFocusPointerRoot, iw.win, xproto.TimeCurrentTime).Check(); err != nil {
		t.Fatal(err)
	}
	return iw
}

func (iw *inputWindow) loadKeymap(t *testing.T) {
	setup := xproto.Setup(iw.c)
	r, err := xproto.GetKeyboardMapping(iw.c, setup.MinKeycode, byte(setup.MaxKeycode-setup.MinKeycode+1)).Reply()
	if err != nil {
		t.Fatal(err)
	}
	iw.min, iw.per, iw.syms = setup.MinKeycode, int(r.KeysymsPerKeycode), r.Keysyms
}

// next returns the next event that match accepts, skipping others; like a
// toolkit it reloads its keymap when told the mapping changed.
func (iw *inputWindow) next(t *testing.T, what string, match func(xgb.Event) bool) xgb.Event {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		evc := make(chan xgb.Event, 1)
		go func() {
			ev, _ := iw.c.WaitForEvent()
			evc <- ev
		}()
		select {
		case ev := <-evc:
			if ev == nil {
				t.Fatalf("connection closed waiting for %s", what)
			}
			if m, ok := ev.(xproto.MappingNotifyEvent); ok && m.Request == xproto.MappingKeyboard {
				iw.remaps++
				iw.loadKeymap(t)
				continue
			}
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// drain collects events until none arrived for a while after a sync round
// trip, for asserting exact sequences.
func (iw *inputWindow) collect(t *testing.T, n int, keep func(xgb.Event) bool) []xgb.Event {
	t.Helper()
	var out []xgb.Event
	for len(out) < n {
		out = append(out, iw.next(t, fmt.Sprintf("event %d of %d", len(out)+1, n), keep))
	}
	return out
}

func (iw *inputWindow) keysym(code xproto.Keycode, state uint16) xproto.Keysym {
	i := int(code-iw.min) * iw.per
	if state&xproto.ModMaskShift != 0 && iw.syms[i+1] != 0 {
		return iw.syms[i+1]
	}
	return iw.syms[i]
}

func act(c displayv1.DisplayServiceClient, t *testing.T, id string, actions ...*displayv1.Action) *displayv1.PerformActionsResponse {
	t.Helper()
	resp, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{SessionId: id, Actions: actions})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func moveTo(x, y int32) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{To: &displayv1.Point{X: x, Y: y}}}}
}

func isButton(ev xgb.Event) bool {
	switch ev.(type) {
	case xproto.ButtonPressEvent, xproto.ButtonReleaseEvent:
		return true
	}
	return false
}

func isKey(ev xgb.Event) bool {
	switch ev.(type) {
	case xproto.KeyPressEvent, xproto.KeyReleaseEvent:
		return true
	}
	return false
}

// The first keys a display is sent reach a program without a keyboard
// mapping change before them. The server copies the keymap of the keyboard
// a key comes from onto the core keyboard when that keyboard changes (here:
// from the X server's own to XTEST's) and tells every client the whole
// mapping changed; Chromium, reloading its keymap then, dropped the key (a
// Down of a select, a Space of a checkbox, in about one session of three).
func TestFirstKeysComeWithoutKeymapChange(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "firstkey", 300, 200)
	iw := newInputWindow(t, s, "firstkey", 300, 200)
	act(c, t, "firstkey", &displayv1.Action{Action: &displayv1.Action_Key{Key: &displayv1.Key{Chord: "Down"}}},
		&displayv1.Action{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: "Ada"}}})
	var got []string
	// Down, Shift, A and d and a, each pressed and released.
	for _, ev := range iw.collect(t, 10, isKey) {
		if k, ok := ev.(xproto.KeyPressEvent); ok && iw.keysym(k.Detail, k.State) != xproto.Keysym(keysym.ShiftL) {
			got = append(got, fmt.Sprintf("%#x", iw.keysym(k.Detail, k.State)))
		}
	}
	if strings.Join(got, " ") != "0xff54 0x41 0x64 0x61" {
		t.Fatalf("key presses %v, want Down A d a", got)
	}
	if iw.remaps != 0 {
		t.Fatalf("the program was told %d times the keyboard mapping changed before the first keys", iw.remaps)
	}
}

func TestInputArrives(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "in", 400, 300)
	iw := newInputWindow(t, s, "in", 400, 300)

	t.Run("mouse_move", func(t *testing.T) {
		resp := act(c, t, "in", moveTo(50, 60))
		if resp.GetCursor().GetX() != 50 || resp.GetCursor().GetY() != 60 {
			t.Errorf("cursor = %v, want 50,60", resp.GetCursor())
		}
		ev := iw.next(t, "motion to 50,60", func(ev xgb.Event) bool {
			m, ok := ev.(xproto.MotionNotifyEvent)
			return ok && m.EventX == 50 && m.EventY == 60
		})
		_ = ev
	})

	t.Run("double right click with shift", func(t *testing.T) {
		act(c, t, "in", &displayv1.Action{Action: &displayv1.Action_Click{Click: &displayv1.Click{
			At: &displayv1.Point{X: 10, Y: 20}, Button: displayv1.MouseButton_MOUSE_BUTTON_RIGHT, Clicks: 2, HoldKeys: []string{"shift"},
		}}})
		evs := iw.collect(t, 4, isButton)
		for i, ev := range evs {
			var detail xproto.Button
			var x, y int16
			var state uint16
			press := i%2 == 0
			switch e := ev.(type) {
			case xproto.ButtonPressEvent:
				if !press {
					t.Fatalf("event %d is a press, want release", i)
				}
				detail, x, y, state = e.Detail, e.EventX, e.EventY, e.State
			case xproto.ButtonReleaseEvent:
				if press {
					t.Fatalf("event %d is a release, want press", i)
				}
				detail, x, y, state = e.Detail, e.EventX, e.EventY, e.State
			}
			if detail != 3 || x != 10 || y != 20 || state&xproto.ModMaskShift == 0 {
				t.Errorf("event %d: button %d at %d,%d state %#x; want button 3 at 10,20 with shift", i, detail, x, y, state)
			}
		}
	})

	t.Run("drag", func(t *testing.T) {
		act(c, t, "in", &displayv1.Action{Action: &displayv1.Action_Drag{Drag: &displayv1.Drag{Path: []*displayv1.Point{
			{X: 100, Y: 100}, {X: 150, Y: 120}, {X: 200, Y: 140},
		}}}})
		press := iw.next(t, "drag press", isButton).(xproto.ButtonPressEvent)
		if press.Detail != 1 || press.EventX != 100 || press.EventY != 100 {
			t.Errorf("press = button %d at %d,%d; want 1 at 100,100", press.Detail, press.EventX, press.EventY)
		}
		iw.next(t, "motion with button 1 to 150,120", func(ev xgb.Event) bool {
			m, ok := ev.(xproto.MotionNotifyEvent)
			return ok && m.EventX == 150 && m.EventY == 120 && m.State&xproto.KeyButMaskButton1 != 0
		})
		rel := iw.next(t, "drag release", isButton).(xproto.ButtonReleaseEvent)
		if rel.Detail != 1 || rel.EventX != 200 || rel.EventY != 140 {
			t.Errorf("release = button %d at %d,%d; want 1 at 200,140", rel.Detail, rel.EventX, rel.EventY)
		}
	})

	t.Run("button down and up", func(t *testing.T) {
		act(c, t, "in",
			&displayv1.Action{Action: &displayv1.Action_Button{Button: &displayv1.ButtonPress{Button: displayv1.MouseButton_MOUSE_BUTTON_MIDDLE, Down: true}}},
			&displayv1.Action{Action: &displayv1.Action_Button{Button: &displayv1.ButtonPress{Button: displayv1.MouseButton_MOUSE_BUTTON_MIDDLE}}})
		evs := iw.collect(t, 2, isButton)
		if p, ok := evs[0].(xproto.ButtonPressEvent); !ok || p.Detail != 2 {
			t.Errorf("first = %v, want press of 2", evs[0])
		}
		if r, ok := evs[1].(xproto.ButtonReleaseEvent); !ok || r.Detail != 2 {
			t.Errorf("second = %v, want release of 2", evs[1])
		}
	})

	t.Run("scroll", func(t *testing.T) {
		act(c, t, "in", &displayv1.Action{Action: &displayv1.Action_Scroll{Scroll: &displayv1.Scroll{
			At: &displayv1.Point{X: 30, Y: 40}, DeltaY: 3, DeltaX: -2,
		}}})
		var got []xproto.Button
		for _, ev := range iw.collect(t, 10, isButton) {
			if p, ok := ev.(xproto.ButtonPressEvent); ok {
				if p.EventX != 30 || p.EventY != 40 {
					t.Errorf("wheel at %d,%d, want 30,40", p.EventX, p.EventY)
				}
				got = append(got, p.Detail)
			}
		}
		if fmt.Sprint(got) != "[5 5 5 6 6]" {
			t.Errorf("wheel buttons = %v, want [5 5 5 6 6]", got)
		}
	})

	t.Run("key chord", func(t *testing.T) {
		act(c, t, "in", &displayv1.Action{Action: &displayv1.Action_Key{Key: &displayv1.Key{Chord: "ctrl+shift+t"}}})
		evs := iw.collect(t, 6, isKey)
		var presses []string
		for _, ev := range evs[:3] {
			p, ok := ev.(xproto.KeyPressEvent)
			if !ok {
				t.Fatalf("want three presses first, got %T", ev)
			}
			presses = append(presses, fmt.Sprintf("%#x", uint32(iw.keysym(p.Detail, 0))))
		}
		if strings.Join(presses, " ") != "0xffe3 0xffe1 0x74" {
			t.Errorf("pressed %v, want Control_L Shift_L t", presses)
		}
		last := evs[2].(xproto.KeyPressEvent)
		if last.State&(xproto.ModMaskControl|xproto.ModMaskShift) != xproto.ModMaskControl|xproto.ModMaskShift {
			t.Errorf("t pressed with state %#x, want ctrl and shift", last.State)
		}
		for _, ev := range evs[3:] {
			if _, ok := ev.(xproto.KeyReleaseEvent); !ok {
				t.Errorf("want releases last, got %T", ev)
			}
		}
	})

	t.Run("key sequence and names", func(t *testing.T) {
		act(c, t, "in", &displayv1.Action{Action: &displayv1.Action_Key{Key: &displayv1.Key{Chord: "Return Escape F5 BackSpace Page_Down super"}}})
		var got []string
		for _, ev := range iw.collect(t, 12, isKey) {
			if p, ok := ev.(xproto.KeyPressEvent); ok {
				got = append(got, fmt.Sprintf("%#x", uint32(iw.keysym(p.Detail, 0))))
			}
		}
		want := "0xff0d 0xff1b 0xffc2 0xff08 0xff56 0xffeb"
		if strings.Join(got, " ") != want {
			t.Errorf("keys = %v, want %s", got, want)
		}
	})

	t.Run("type unicode", func(t *testing.T) {
		const text = "Hi, é€ 😀 ж!\n"
		act(c, t, "in", &displayv1.Action{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: text}}})
		var typed []rune
		for len(typed) < len([]rune(text)) {
			ev := iw.next(t, fmt.Sprintf("key press for %q", string([]rune(text)[len(typed)])), func(ev xgb.Event) bool {
				_, ok := ev.(xproto.KeyPressEvent)
				return ok
			})
			p := ev.(xproto.KeyPressEvent)
			sym := uint32(iw.keysym(p.Detail, p.State))
			switch {
			case sym == 0xffe1 || sym == 0xffe2:
				continue // Shift itself
			case sym == 0xff0d:
				typed = append(typed, '\n')
			case sym < 0x100:
				typed = append(typed, rune(sym))
			case sym&0xff000000 == 0x01000000:
				typed = append(typed, rune(sym&0xffffff))
			default:
				t.Fatalf("unexpected keysym %#x after %q", sym, string(typed))
			}
		}
		if string(typed) != text {
			t.Errorf("typed %q, want %q", string(typed), text)
		}
	})

	t.Run("wait and settled screenshot", func(t *testing.T) {
		resp, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{
			SessionId: "in",
			Actions: []*displayv1.Action{
				moveTo(5, 5),
				{Action: &displayv1.Action_Wait{Wait: &displayv1.Wait{Duration: durationpb.New(10 * time.Millisecond)}}},
			},
			Screenshot: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetScreenshot() == nil {
			t.Fatal("no screenshot")
		}
		img := decodePNG(t, resp.GetScreenshot().GetData())
		if img.Bounds().Dx() != 400 || img.Bounds().Dy() != 300 {
			t.Errorf("screenshot is %v", img.Bounds())
		}
	})
}

// A screenshot asked for with the actions shows what the actions caused.
func TestSettledScreenshotShowsResult(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "settle", 300, 200)
	xc := clientConn(t, s, "settle")
	screen := xproto.Setup(xc).DefaultScreen(xc)
	// A client that paints a red window where the user clicks, like an app
	// reacting to input.
	if err := xproto.ChangeWindowAttributesChecked(xc, screen.Root, xproto.CwEventMask, []uint32{xproto.EventMaskButtonPress}).Check(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			ev, err := xc.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			if p, ok := ev.(xproto.ButtonPressEvent); ok {
				wid, _ := xproto.NewWindowId(xc)
				xproto.CreateWindow(xc, screen.RootDepth, wid, screen.Root, p.RootX, p.RootY, 40, 40, 0,
					xproto.WindowClassInputOutput, screen.RootVisual, xproto.CwBackPixel|xproto.CwOverrideRedirect, []uint32{0xff0000, 1})
				xproto.MapWindow(xc, wid)
				xproto.GetInputFocus(xc).Reply()
			}
		}
	}()
	resp, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{
		SessionId:  "settle",
		Actions:    []*displayv1.Action{{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: 100, Y: 50}}}}},
		Screenshot: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, resp.GetScreenshot().GetData())
	if !isRed(img.At(120, 70)) {
		t.Errorf("settled screenshot at 120,70 is %v, want the red window the click caused", img.At(120, 70))
	}
}

func TestActionValidation(t *testing.T) {
	_, c := testService(t, "")
	createDisplay(t, c, "val", 200, 100)
	click := func(cl *displayv1.Click) *displayv1.Action {
		return &displayv1.Action{Action: &displayv1.Action_Click{Click: cl}}
	}
	tests := []struct {
		name    string
		actions []*displayv1.Action
	}{
		{"no actions", nil},
		{"empty action", []*displayv1.Action{{}}},
		{"move off screen", []*displayv1.Action{moveTo(200, 10)}},
		{"move negative", []*displayv1.Action{moveTo(-1, 10)}},
		{"move without point", []*displayv1.Action{{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{}}}}},
		{"click four times", []*displayv1.Action{click(&displayv1.Click{Clicks: 4})}},
		{"click unknown button", []*displayv1.Action{click(&displayv1.Click{Button: 7})}},
		{"click unknown hold key", []*displayv1.Action{click(&displayv1.Click{HoldKeys: []string{"hyperdrive"}})}},
		{"click off screen", []*displayv1.Action{click(&displayv1.Click{At: &displayv1.Point{X: 5, Y: 100}})}},
		{"drag one point", []*displayv1.Action{{Action: &displayv1.Action_Drag{Drag: &displayv1.Drag{Path: []*displayv1.Point{{X: 1, Y: 1}}}}}}},
		{"drag off screen", []*displayv1.Action{{Action: &displayv1.Action_Drag{Drag: &displayv1.Drag{Path: []*displayv1.Point{{X: 1, Y: 1}, {X: 500, Y: 1}}}}}}},
		{"scroll nothing", []*displayv1.Action{{Action: &displayv1.Action_Scroll{Scroll: &displayv1.Scroll{}}}}},
		{"scroll too far", []*displayv1.Action{{Action: &displayv1.Action_Scroll{Scroll: &displayv1.Scroll{DeltaY: 1000}}}}},
		{"unknown key", []*displayv1.Action{{Action: &displayv1.Action_Key{Key: &displayv1.Key{Chord: "ctrl+frobnicate"}}}}},
		{"empty chord", []*displayv1.Action{{Action: &displayv1.Action_Key{Key: &displayv1.Key{}}}}},
		{"empty text", []*displayv1.Action{{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{}}}}},
		{"text too long", []*displayv1.Action{{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: strings.Repeat("a", 10001)}}}}},
		{"text with control character", []*displayv1.Action{{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: "a\x07b"}}}}},
		{"wait without duration", []*displayv1.Action{{Action: &displayv1.Action_Wait{Wait: &displayv1.Wait{}}}}},
		{"wait too long", []*displayv1.Action{{Action: &displayv1.Action_Wait{Wait: &displayv1.Wait{Duration: durationpb.New(31 * time.Second)}}}}},
		{"waits add up too long", []*displayv1.Action{
			{Action: &displayv1.Action_Wait{Wait: &displayv1.Wait{Duration: durationpb.New(20 * time.Second)}}},
			{Action: &displayv1.Action_Wait{Wait: &displayv1.Wait{Duration: durationpb.New(20 * time.Second)}}},
		}},
		// The first action is valid: nothing may run before the bad one is found.
		{"valid then invalid", []*displayv1.Action{moveTo(1, 1), moveTo(1000, 1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{SessionId: "val", Actions: tc.actions})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code = %v (%v), want InvalidArgument", status.Code(err), err)
			}
		})
	}
	// The pointer never moved to 1,1.
	resp := act(c, t, "val", moveTo(150, 50))
	if resp.GetCursor().GetX() != 150 {
		t.Fatalf("cursor = %v", resp.GetCursor())
	}
}

func TestLeaseFencing(t *testing.T) {
	_, c := testService(t, "")
	createDisplay(t, c, "lease", 100, 100)
	steps := []struct {
		token int64
		code  codes.Code
	}{
		{0, codes.OK},                 // no leases in use yet
		{5, codes.OK},                 // a holder appears
		{5, codes.OK},                 // and acts again
		{4, codes.FailedPrecondition}, // an older holder is fenced off
		{0, codes.FailedPrecondition}, // as is input without a token
		{7, codes.OK},                 // a newer holder takes over
		{5, codes.FailedPrecondition}, // the previous one cannot act
		{-1, codes.InvalidArgument},
		{5, codes.OK | 100},           // the old holder cannot release the newer lease
		{0, codes.FailedPrecondition}, // so input without a token is still refused
		{7, codes.OK | 100},           // the holder gives the lease up
		{0, codes.OK},                 // no lease held: input without a token is accepted again
		{5, codes.FailedPrecondition}, // an old holder stays fenced off
		{8, codes.OK},                 // and a new holder fences again
		{0, codes.FailedPrecondition},
	}
	for i, st := range steps {
		req := &displayv1.PerformActionsRequest{SessionId: "lease", LeaseToken: st.token, Actions: []*displayv1.Action{moveTo(int32(i), 1)}}
		if st.code == codes.OK|100 {
			req.Actions, req.ReleaseLease = nil, true
			st.code = codes.OK
		}
		_, err := c.PerformActions(ctxT(t), req)
		if status.Code(err) != st.code {
			t.Fatalf("step %d (token %d): %v, want %v", i, st.token, err, st.code)
		}
		// A fenced-off holder is told so by reason, not only by wording.
		if stale := st.code == codes.FailedPrecondition; stale != (errinfo.Reason(err) == errinfo.StaleInputLease) {
			t.Fatalf("step %d (token %d): reason %q of %v", i, st.token, errinfo.Reason(err), err)
		}
	}
}

// Deleting a display ends a request that is waiting on it.
func TestDeleteEndsPendingActions(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "busy", 100, 100)
	d := s.mustDisplay(t, "busy")
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.PerformActions(ctx, &displayv1.PerformActionsRequest{SessionId: "busy", Actions: []*displayv1.Action{
			{Action: &displayv1.Action_Wait{Wait: &displayv1.Wait{Duration: durationpb.New(25 * time.Second)}}},
		}})
		errc <- err
	}()
	// The request holds the display's input once its wait has begun.
	testkit.Eventually(t, 5*time.Second, func() bool {
		if d.inputMu.TryLock() {
			d.inputMu.Unlock()
			return false
		}
		return true
	}, "the wait to start")
	if _, err := c.DeleteDisplay(ctxT(t), &displayv1.DeleteDisplayRequest{SessionId: "busy"}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; status.Code(err) != codes.NotFound {
		t.Fatalf("pending actions ended with %v, want NotFound", err)
	}
}

// Fence is the lease of another service's input (the sandbox's
// accessibility acts): refused as display actions are, with the same
// status and reason, and act not run; run for the holder, its error
// unchanged; run for anyone once the lease is given up, or on a session
// without a display.
func TestFenceHoldsOtherInputToTheLease(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "fenced", 100, 100)
	ran := 0
	act := func() error { ran++; return nil }
	if err := s.Fence(ctxT(t), "fenced", 0, act); err != nil || ran != 1 {
		t.Fatalf("no lease held: %v, ran %d", err, ran)
	}
	// Holder A takes the lease by acting with its token.
	if _, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{SessionId: "fenced", LeaseToken: 7, Actions: []*displayv1.Action{moveTo(3, 3)}}); err != nil {
		t.Fatal(err)
	}
	for _, token := range []int64{0, 6} { // B: no token, an older one
		err := s.Fence(ctxT(t), "fenced", token, act)
		if status.Code(err) != codes.FailedPrecondition || errinfo.Reason(err) != errinfo.StaleInputLease || ran != 1 {
			t.Fatalf("token %d while 7 holds the lease: %v (reason %q), ran %d", token, err, errinfo.Reason(err), ran)
		}
	}
	if err := s.Fence(ctxT(t), "fenced", 7, act); err != nil || ran != 2 {
		t.Fatalf("the holder: %v, ran %d", err, ran)
	}
	boom := errors.New("the act failed")
	if err := s.Fence(ctxT(t), "fenced", 7, func() error { return boom }); err != boom {
		t.Fatalf("the act's own error: %v", err)
	}
	// Input through Fence fences too: a newer holder shuts the display's
	// actions of the older one out.
	if err := s.Fence(ctxT(t), "fenced", 9, act); err != nil || ran != 3 {
		t.Fatalf("a newer holder: %v, ran %d", err, ran)
	}
	if _, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{SessionId: "fenced", LeaseToken: 7, Actions: []*displayv1.Action{moveTo(4, 4)}}); errinfo.Reason(err) != errinfo.StaleInputLease {
		t.Fatalf("the older holder's display action: %v", err)
	}
	if _, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{SessionId: "fenced", LeaseToken: 9, ReleaseLease: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Fence(ctxT(t), "fenced", 0, act); err != nil || ran != 4 {
		t.Fatalf("the lease given up: %v, ran %d", err, ran)
	}
	if err := s.Fence(ctxT(t), "no-display", 0, act); err != nil || ran != 5 {
		t.Fatalf("a session without a display: %v, ran %d", err, ran)
	}
}
