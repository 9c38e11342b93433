package display

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/capture"
	"github.com/deskgrid/deskgrid/services/display/internal/scale"
	"github.com/deskgrid/deskgrid/services/display/internal/selection"
	"github.com/deskgrid/deskgrid/services/display/internal/xinput"
	"github.com/deskgrid/deskgrid/services/platform/keysym"
)

const (
	maxActions    = 1000
	maxTextRunes  = 10000
	maxPathPoints = 10000
	maxScroll     = 100
	maxClicks     = 3
)

// step is one validated action, ready to run against X.
type step struct {
	kind     string
	at       *point // nil: where the pointer is
	button   byte
	clicks   int
	down     bool
	hold     []keysym.Keysym
	path     []point
	scrollY  int
	scrollX  int
	chords   [][]keysym.Keysym
	holdFor  time.Duration
	text     []keysym.Keysym
	paste    string
	duration time.Duration
	zoom     shotSpec
}

type point struct{ x, y int }

// PerformActions sends input to the session's display, in order, and
// optionally returns a screenshot once the screen has settled.
func (s *Service) PerformActions(ctx context.Context, req *displayv1.PerformActionsRequest) (*displayv1.PerformActionsResponse, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	d, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	w, h := d.size()
	m, err := validateScale(req.GetScaleTo(), w, h)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	format, err := validateFormat(req.GetScreenshotFormat(), req.GetScreenshotQuality())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if req.GetReleaseLease() {
		if req.GetLeaseToken() <= 0 {
			return nil, s.toStatus(ctx, invalidf("release_lease needs the lease_token being released"))
		}
		if len(req.GetActions()) == 0 && !req.GetScreenshot() {
			d.inputMu.Lock()
			d.release(req.GetLeaseToken())
			d.inputMu.Unlock()
			return &displayv1.PerformActionsResponse{}, nil
		}
	}
	out := shotOptions{format: format, quality: int(req.GetScreenshotQuality()), cursor: req.GetScreenshotCursor()}
	steps, err := s.plan(req.GetActions(), m, out)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if req.GetLeaseToken() < 0 {
		return nil, s.toStatus(ctx, invalidf("lease_token %d is negative", req.GetLeaseToken()))
	}
	so, skip, err := s.settleOptions(req.GetSettle())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	var shot *shotSpec
	if req.GetScreenshot() {
		spec, _ := validateRegion(nil, m)
		spec.format, spec.quality, spec.cursor = out.format, out.quality, out.cursor
		shot = &spec
	}
	resp, err := s.perform(ctx, d, steps, shot, m, req.GetLeaseToken(), settleSpec{so, skip})
	if err != nil {
		return nil, s.toStatus(ctx, d.explain(err))
	}
	if req.GetReleaseLease() {
		d.inputMu.Lock()
		d.release(req.GetLeaseToken())
		d.inputMu.Unlock()
	}
	return resp, nil
}

// shotOptions are how a request wants its images.
type shotOptions struct {
	format  capture.Format
	quality int
	cursor  bool
}

// plan validates every action before any reaches X, so a bad request does
// nothing at all. Coordinates are in m's scaled space and come out as
// screen pixels.
func (s *Service) plan(actions []*displayv1.Action, m scale.Mapping, out shotOptions) ([]step, error) {
	w, h := m.W, m.H
	if len(actions) == 0 {
		return nil, invalidf("actions is empty")
	}
	if len(actions) > maxActions {
		return nil, invalidf("%d actions; at most %d per request", len(actions), maxActions)
	}
	onScreen := func(i int, what string, p *displayv1.Point) (*point, error) {
		if p == nil {
			return nil, nil
		}
		x, y := int(p.GetX()), int(p.GetY())
		if x < 0 || y < 0 || x >= w || y >= h {
			return nil, invalidf("action %d: %s (%d,%d) is outside the %dx%d screen", i, what, x, y, w, h)
		}
		x, y = m.ToScreen(x, y)
		return &point{x, y}, nil
	}
	button := func(i int, b displayv1.MouseButton) (byte, error) {
		switch b {
		case displayv1.MouseButton_MOUSE_BUTTON_UNSPECIFIED, displayv1.MouseButton_MOUSE_BUTTON_LEFT:
			return xinput.ButtonLeft, nil
		case displayv1.MouseButton_MOUSE_BUTTON_MIDDLE:
			return xinput.ButtonMiddle, nil
		case displayv1.MouseButton_MOUSE_BUTTON_RIGHT:
			return xinput.ButtonRight, nil
		case displayv1.MouseButton_MOUSE_BUTTON_BACK:
			return xinput.ButtonBack, nil
		case displayv1.MouseButton_MOUSE_BUTTON_FORWARD:
			return xinput.ButtonForward, nil
		}
		return 0, invalidf("action %d: unknown mouse button %d", i, b)
	}
	holdKeys := func(i int, names []string) ([]keysym.Keysym, error) {
		var out []keysym.Keysym
		for _, n := range names {
			sym, err := keysym.Name(n)
			if err != nil {
				return nil, invalidf("action %d: hold_keys: %v", i, err)
			}
			out = append(out, sym)
		}
		return out, nil
	}
	var waited time.Duration
	steps := make([]step, 0, len(actions))
	for i, a := range actions {
		var st step
		var err error
		switch act := a.GetAction().(type) {
		case *displayv1.Action_MouseMove:
			st.kind = "move"
			if act.MouseMove.GetTo() == nil {
				return nil, invalidf("action %d: mouse_move needs to", i)
			}
			st.at, err = onScreen(i, "mouse_move.to", act.MouseMove.GetTo())
		case *displayv1.Action_Click:
			c := act.Click
			st.kind = "click"
			if st.at, err = onScreen(i, "click.at", c.GetAt()); err != nil {
				return nil, err
			}
			if st.button, err = button(i, c.GetButton()); err != nil {
				return nil, err
			}
			st.clicks = int(c.GetClicks())
			if st.clicks == 0 {
				st.clicks = 1
			}
			if st.clicks < 1 || st.clicks > maxClicks {
				return nil, invalidf("action %d: clicks %d is outside 1-%d", i, c.GetClicks(), maxClicks)
			}
			st.hold, err = holdKeys(i, c.GetHoldKeys())
		case *displayv1.Action_Drag:
			st.kind = "drag"
			pts := act.Drag.GetPath()
			if len(pts) < 2 || len(pts) > maxPathPoints {
				return nil, invalidf("action %d: drag path has %d points; it needs 2-%d", i, len(pts), maxPathPoints)
			}
			for _, p := range pts {
				pt, err := onScreen(i, "drag.path point", p)
				if err != nil {
					return nil, err
				}
				if pt == nil {
					return nil, invalidf("action %d: drag path has an empty point", i)
				}
				st.path = append(st.path, *pt)
			}
		case *displayv1.Action_Button:
			st.kind = "button"
			st.button, err = button(i, act.Button.GetButton())
			st.down = act.Button.GetDown()
		case *displayv1.Action_Scroll:
			sc := act.Scroll
			st.kind = "scroll"
			if st.at, err = onScreen(i, "scroll.at", sc.GetAt()); err != nil {
				return nil, err
			}
			st.scrollY, st.scrollX = int(sc.GetDeltaY()), int(sc.GetDeltaX())
			if st.scrollX == 0 && st.scrollY == 0 {
				return nil, invalidf("action %d: scroll needs delta_y or delta_x", i)
			}
			if abs(st.scrollY) > maxScroll || abs(st.scrollX) > maxScroll {
				return nil, invalidf("action %d: scroll deltas are at most %d clicks", i, maxScroll)
			}
			st.hold, err = holdKeys(i, sc.GetHoldKeys())
		case *displayv1.Action_Key:
			st.kind = "key"
			if st.chords, err = keysym.ParseChords(act.Key.GetChord()); err != nil {
				return nil, invalidf("action %d: %v", i, err)
			}
			if hd := act.Key.GetHold(); hd != nil {
				if err := hd.CheckValid(); err != nil || hd.AsDuration() < 0 {
					return nil, invalidf("action %d: key hold is not a valid duration", i)
				}
				st.holdFor = hd.AsDuration()
				waited += st.holdFor
			}
		case *displayv1.Action_Type:
			st.kind = "type"
			text := act.Type.GetText()
			if text == "" {
				return nil, invalidf("action %d: type needs text", i)
			}
			if act.Type.GetPaste() {
				st.kind = "paste"
				if len(text) > selection.MaxBytes {
					return nil, invalidf("action %d: text to paste is %d bytes; at most %d (1 MiB)", i, len(text), selection.MaxBytes)
				}
				chord := act.Type.GetPasteChord()
				if chord == "" {
					chord = "ctrl+v"
				}
				if st.chords, err = keysym.ParseChords(chord); err != nil {
					return nil, invalidf("action %d: paste_chord: %v", i, err)
				}
				if len(st.chords) != 1 {
					return nil, invalidf("action %d: paste_chord %q is not one chord", i, chord)
				}
				st.paste = text
				break
			}
			if act.Type.GetPasteChord() != "" {
				return nil, invalidf("action %d: paste_chord needs paste", i)
			}
			if n := utf8.RuneCountInString(text); n > maxTextRunes {
				return nil, invalidf("action %d: text has %d characters; at most %d", i, n, maxTextRunes)
			}
			if st.text, err = keysym.Text(text); err != nil {
				return nil, invalidf("action %d: %v", i, err)
			}
		case *displayv1.Action_Wait:
			st.kind = "wait"
			wd := act.Wait.GetDuration()
			if wd == nil || wd.CheckValid() != nil || wd.AsDuration() <= 0 {
				return nil, invalidf("action %d: wait needs a positive duration", i)
			}
			st.duration = wd.AsDuration()
			waited += st.duration
		case *displayv1.Action_Zoom:
			st.kind = "zoom"
			z := act.Zoom
			if z.GetRegion() == nil || z.GetRegion().GetWidth() <= 0 || z.GetRegion().GetHeight() <= 0 {
				return nil, invalidf("action %d: zoom needs a region with a width and height", i)
			}
			spec, err := validateRegion(z.GetRegion(), m)
			if err != nil {
				return nil, invalidf("action %d: zoom: %v", i, err)
			}
			// Full resolution: the region's screen pixels, fitted into the
			// asked size (or the scaled space, or left as they are).
			bw, bh := spec.rect.Width, spec.rect.Height
			if m.Scaled() {
				bw, bh = m.W, m.H
			}
			if sz := z.GetSize(); sz != nil && (sz.GetWidth() != 0 || sz.GetHeight() != 0) {
				if sz.GetWidth() <= 0 || sz.GetHeight() <= 0 || sz.GetWidth() > maxWidth || sz.GetHeight() > maxHeight {
					return nil, invalidf("action %d: zoom size %dx%d is outside 1x1-%dx%d", i, sz.GetWidth(), sz.GetHeight(), maxWidth, maxHeight)
				}
				bw, bh = int(sz.GetWidth()), int(sz.GetHeight())
			}
			spec.outW, spec.outH = scale.Fit(spec.rect.Width, spec.rect.Height, bw, bh)
			spec.format, spec.quality, spec.cursor = out.format, out.quality, out.cursor
			st.zoom = spec
		case *displayv1.Action_CursorPosition:
			st.kind = "cursor_position"
		default:
			return nil, invalidf("action %d is empty", i)
		}
		if err != nil {
			return nil, err
		}
		if waited > s.cfg.MaxWait {
			return nil, invalidf("waits and key holds add up to more than %v", s.cfg.MaxWait)
		}
		steps = append(steps, st)
	}
	return steps, nil
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func (s *Service) perform(ctx context.Context, d *display, steps []step, shot *shotSpec, m scale.Mapping, token int64, settle settleSpec) (*displayv1.PerformActionsResponse, error) {
	// Deleting the display ends a long wait or text at once.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.done, cancel)()
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	if err := d.usable(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, d.explain(err)
	}
	if err := d.fence(token); err != nil {
		return nil, err
	}
	in := d.input
	resp := &displayv1.PerformActionsResponse{}
	// What changes from here on may be the input's effect: a program can
	// answer a press before the rest of the input is done.
	began := time.Now()
	endOwn := d.watch.OwnInput(began)
	defer endOwn()
	for _, st := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if st.kind == "zoom" {
			// The image shows the effect of the input before it.
			if err := in.Sync(); err != nil {
				return nil, err
			}
			img, err := s.screenshot(d, st.zoom)
			if err != nil {
				return nil, err
			}
			resp.Images = append(resp.Images, img)
			continue
		}
		if st.kind == "paste" {
			if err := d.paste(ctx, in, st); err != nil {
				return nil, err
			}
			continue
		}
		if err := s.run(ctx, in, st); err != nil {
			return nil, err
		}
	}
	if err := in.Sync(); err != nil {
		return nil, err
	}
	endOwn()
	done := time.Now()
	x, y, err := in.Pointer()
	if err != nil {
		return nil, err
	}
	x, y = m.ToScaled(x, y)
	resp.Cursor = &displayv1.Point{X: int32(x), Y: int32(y)}
	if shot != nil {
		if resp.Settle, resp.Screenshot, err = s.settleAndShoot(ctx, d, began, done, settle, *shot); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// shotAhead is a screenshot taken while a settle wait went on: stamp is
// the screen's last change known before it was grabbed.
type shotAhead struct {
	stamp time.Time
	shot  *displayv1.ScreenshotResponse
}

// settleAndShoot waits for the effect of input as o says, then answers
// the screenshot shot asks for. While it waits, once the screen has been
// quiet for half the quiet period after a change, the screenshot is taken
// ahead: when nothing changed since, that is the answer, and grabbing and
// encoding it is not added to the wait. Anything that changed after it was
// grabbed (the input's effect, or anything else) makes a new one.
func (s *Service) settleAndShoot(ctx context.Context, d *display, began, done time.Time, o settleSpec, shot shotSpec) (*displayv1.SettleResult, *displayv1.ScreenshotResponse, error) {
	if o.skip {
		res, err := s.settle(ctx, d, began, done, o)
		if err != nil {
			return nil, nil, err
		}
		img, err := s.screenshot(d, shot)
		return res, img, err
	}
	actx, stop := context.WithCancel(ctx)
	ahead := make(chan shotAhead, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		s.shootAhead(actx, d, began, o.Quiet/2, shot, ahead)
	}()
	res, err := s.settle(ctx, d, began, done, o)
	stop()
	<-finished
	if err != nil {
		return nil, nil, err
	}
	select {
	case a := <-ahead:
		if last, _ := d.watch.Latest(); a.stamp.Equal(last) {
			return res, a.shot, nil
		}
	default:
	}
	img, err := s.screenshot(d, shot)
	return res, img, err
}

// shootAhead takes a screenshot whenever the screen has been quiet for
// after since its last change (a change after since), and leaves the latest
// in out, until ctx ends.
func (s *Service) shootAhead(ctx context.Context, d *display, since time.Time, after time.Duration, shot shotSpec, out chan shotAhead) {
	var taken time.Time
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		last, wake := d.watch.Latest()
		wait := time.Hour
		if last.After(since) && !last.Equal(taken) {
			if wait = time.Until(last.Add(after)); wait <= 0 {
				taken = last
				img, err := s.screenshot(d, shot)
				if err != nil {
					return // the answer's own screenshot says why
				}
				select {
				case <-out:
				default:
				}
				out <- shotAhead{stamp: last, shot: img}
				continue
			}
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-t.C:
		}
	}
}

// maxSettle bounds any wait a request may ask for.
const maxSettle = time.Minute

// settleOptions is the request's settle settings over the configured ones.
func (s *Service) settleOptions(req *displayv1.Settle) (capture.SettleOptions, bool, error) {
	o := capture.SettleOptions{ChangeTimeout: s.cfg.SettleChange, Quiet: s.cfg.SettleQuiet, MaxQuiet: s.cfg.SettleMaxQuiet, Timeout: s.cfg.SettleTimeout}
	if req == nil {
		return o, false, nil
	}
	for _, f := range []struct {
		name string
		d    *durationpb.Duration
		to   *time.Duration
	}{{"change_timeout", req.GetChangeTimeout(), &o.ChangeTimeout}, {"quiet", req.GetQuiet(), &o.Quiet}, {"timeout", req.GetTimeout(), &o.Timeout}} {
		if f.d == nil {
			continue
		}
		if err := f.d.CheckValid(); err != nil {
			return o, false, invalidf("settle.%s: %v", f.name, err)
		}
		v := f.d.AsDuration()
		if v < 0 || v > maxSettle {
			return o, false, invalidf("settle.%s %v is outside [0, %v]", f.name, v, maxSettle)
		}
		if v > 0 {
			*f.to = v
		}
	}
	o.MaxQuiet = max(o.MaxQuiet, o.Quiet)
	return o, req.GetSkip(), nil
}

// settle waits for the effect of input that began at began and ended at
// done, as o says.
func (s *Service) settle(ctx context.Context, d *display, began, done time.Time, o settleSpec) (*displayv1.SettleResult, error) {
	if o.skip {
		return &displayv1.SettleResult{Outcome: displayv1.SettleOutcome_SETTLE_OUTCOME_SKIPPED, Waited: durationpb.New(time.Since(done))}, nil
	}
	rep, err := d.watch.Settle(ctx, began, done, o.SettleOptions)
	if err != nil {
		return nil, err
	}
	out := &displayv1.SettleResult{Waited: durationpb.New(rep.Waited)}
	switch rep.Outcome {
	case capture.Settled:
		out.Outcome = displayv1.SettleOutcome_SETTLE_OUTCOME_SETTLED
	case capture.Busy:
		out.Outcome = displayv1.SettleOutcome_SETTLE_OUTCOME_BUSY
	case capture.NoChange:
		out.Outcome = displayv1.SettleOutcome_SETTLE_OUTCOME_NO_CHANGE
	}
	if rep.Outcome != capture.NoChange {
		out.FirstChange = durationpb.New(rep.FirstChange)
	}
	return out, nil
}

// settleSpec is a validated settle request.
type settleSpec struct {
	capture.SettleOptions
	skip bool
}

func (s *Service) run(ctx context.Context, in *xinput.Injector, st step) error {
	switch st.kind {
	case "move":
		in.Move(st.at.x, st.at.y)
	case "click":
		if st.at != nil {
			in.Move(st.at.x, st.at.y)
		}
		held, err := in.KeyDown(st.hold)
		if err != nil {
			return err
		}
		for range st.clicks {
			in.Button(st.button, true)
			in.Button(st.button, false)
		}
		in.KeyUp(held)
	case "drag":
		in.Move(st.path[0].x, st.path[0].y)
		in.Button(xinput.ButtonLeft, true)
		for _, p := range st.path[1:] {
			in.Move(p.x, p.y)
		}
		in.Button(xinput.ButtonLeft, false)
	case "button":
		in.Button(st.button, st.down)
	case "cursor_position":
		// The response carries the pointer position.
	case "scroll":
		if st.at != nil {
			in.Move(st.at.x, st.at.y)
		}
		held, err := in.KeyDown(st.hold)
		if err != nil {
			return err
		}
		wheel := func(n int, neg, pos byte) {
			b := pos
			if n < 0 {
				b, n = neg, -n
			}
			for range n {
				in.Button(b, true)
				in.Button(b, false)
			}
		}
		wheel(st.scrollY, xinput.ButtonWheelUp, xinput.ButtonWheelDown)
		wheel(st.scrollX, xinput.ButtonWheelLeft, xinput.ButtonWheelRight)
		in.KeyUp(held)
	case "key":
		for _, chord := range st.chords {
			codes, err := in.KeyDown(chord)
			if err != nil {
				return err
			}
			if st.holdFor > 0 {
				// The keys must be seen down for the whole hold.
				if err := in.Sync(); err != nil {
					in.KeyUp(codes)
					return err
				}
				if err := sleep(ctx, st.holdFor); err != nil {
					in.KeyUp(codes)
					return err
				}
			}
			in.KeyUp(codes)
		}
	case "type":
		return in.Type(ctx, st.text)
	case "wait":
		// Input sent so far takes effect before the pause starts.
		if err := in.Sync(); err != nil {
			return err
		}
		return sleep(ctx, st.duration)
	default:
		return fmt.Errorf("unknown action kind %q", st.kind)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pasteSaveTimeout bounds reading what the CLIPBOARD held before a paste;
// pasteReadTimeout bounds the wait for the focused program to read the
// text pasted before the CLIPBOARD is restored.
const (
	pasteSaveTimeout = 2 * time.Second
	pasteReadTimeout = 2 * time.Second
)

// paste puts the step's text on the CLIPBOARD, presses its chord, waits
// for a program to read the text (the paste), and puts back what the
// CLIPBOARD held before. Callers hold inputMu.
func (d *display) paste(ctx context.Context, in *xinput.Injector, st step) error {
	sctx, scancel := context.WithTimeout(ctx, pasteSaveTimeout)
	saved := d.selections.Save(sctx, selection.Clipboard)
	scancel()
	wctx, cancel := context.WithTimeout(ctx, clipboardTimeout)
	defer cancel()
	served, err := d.selections.SetServed(wctx, selection.Clipboard, st.paste)
	if err != nil {
		return fmt.Errorf("put the text to paste on the clipboard: %w", err)
	}
	codes, err := in.KeyDown(st.chords[0])
	if err != nil {
		return err
	}
	in.KeyUp(codes)
	t := time.NewTimer(pasteReadTimeout)
	defer t.Stop()
	select {
	case <-served:
	case <-t.C:
	case <-ctx.Done():
	case <-d.done.Done():
	}
	// Restored even when the caller gave up: the paste happened.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), clipboardTimeout)
	defer rcancel()
	// A failure leaves the pasted text on the CLIPBOARD, which is no
	// failure of the paste.
	_ = d.selections.Restore(rctx, saved)
	return nil
}
