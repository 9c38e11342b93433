package display

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// requestorWindow makes an unmapped window that receives property changes,
// as a program asking for a selection has.
func requestorWindow(tb testing.TB, xc *xgb.Conn) xproto.Window {
	tb.Helper()
	screen := xproto.Setup(xc).DefaultScreen(xc)
	wid, err := xproto.NewWindowId(xc)
	if err != nil {
		tb.Fatal(err)
	}
	if err := xproto.CreateWindowChecked(xc, screen.RootDepth, wid, screen.Root, 0, 0, 1, 1, 0,
		xproto.WindowClassInputOutput, screen.RootVisual, xproto.CwEventMask,
		[]uint32{xproto.EventMaskPropertyChange}).Check(); err != nil {
		tb.Fatal(err)
	}
	return wid
}

// nextEvent waits for the first event of xc that match accepts.
func nextEvent[E any](tb testing.TB, xc *xgb.Conn, match func(E) bool) E {
	tb.Helper()
	type res struct {
		ev  xgb.Event
		err xgb.Error
	}
	deadline := time.After(10 * time.Second)
	for {
		ch := make(chan res, 1)
		go func() {
			ev, err := xc.WaitForEvent()
			ch <- res{ev, err}
		}()
		select {
		case r := <-ch:
			if r.err != nil {
				tb.Fatalf("X error: %v", r.err)
			}
			if e, ok := r.ev.(E); ok && match(e) {
				return e
			}
		case <-deadline:
			var zero E
			tb.Fatalf("no %T within 10s", zero)
		}
	}
}

// readSelection reads a selection as an X program does (ICCCM 2.4),
// written here independently of the service's own code: ConvertSelection,
// wait for SelectionNotify, read the property, and follow INCR.
func readSelection(tb testing.TB, xc *xgb.Conn, selName, targetName string) (typ string, data []byte) {
	tb.Helper()
	win := requestorWindow(tb, xc)
	sel, target, prop := atom(tb, xc, selName), atom(tb, xc, targetName), atom(tb, xc, "TEST_SEL")
	xproto.ConvertSelection(xc, win, sel, target, prop, xproto.TimeCurrentTime)
	n := nextEvent(tb, xc, func(e xproto.SelectionNotifyEvent) bool { return e.Requestor == win })
	if n.Property == xproto.AtomNone {
		return "", nil
	}
	p, err := xproto.GetProperty(xc, true, win, prop, xproto.GetPropertyTypeAny, 0, 1<<20).Reply()
	if err != nil {
		tb.Fatal(err)
	}
	if p.Type != atom(tb, xc, "INCR") {
		return atomName(tb, xc, p.Type), p.Value
	}
	for {
		nextEvent(tb, xc, func(e xproto.PropertyNotifyEvent) bool {
			return e.Window == win && e.Atom == prop && e.State == xproto.PropertyNewValue
		})
		p, err := xproto.GetProperty(xc, true, win, prop, xproto.GetPropertyTypeAny, 0, 1<<20).Reply()
		if err != nil {
			tb.Fatal(err)
		}
		if len(p.Value) == 0 {
			return typ, data
		}
		typ = atomName(tb, xc, p.Type)
		data = append(data, p.Value...)
	}
}

func atomName(tb testing.TB, xc *xgb.Conn, a xproto.Atom) string {
	tb.Helper()
	r, err := xproto.GetAtomName(xc, a).Reply()
	if err != nil {
		tb.Fatal(err)
	}
	return r.Name
}

// ownSelection makes a program on the display (its own connection) own
// the selection with text, offered as UTF8_STRING, serving requests until
// the test ends; answer false makes it never answer.
func ownSelection(tb testing.TB, xc *xgb.Conn, selName, text string, answer bool) {
	tb.Helper()
	ownSelectionAs(tb, xc, selName, "UTF8_STRING", []byte(text), answer)
}

// ownSelectionAs is ownSelection offering data as the target targetName.
func ownSelectionAs(tb testing.TB, xc *xgb.Conn, selName, targetName string, data []byte, answer bool) {
	tb.Helper()
	screen := xproto.Setup(xc).DefaultScreen(xc)
	win, err := xproto.NewWindowId(xc)
	if err != nil {
		tb.Fatal(err)
	}
	if err := xproto.CreateWindowChecked(xc, 0, win, screen.Root, 0, 0, 1, 1, 0,
		xproto.WindowClassInputOnly, screen.RootVisual, 0, nil).Check(); err != nil {
		tb.Fatal(err)
	}
	sel, utf8s, targets := atom(tb, xc, selName), atom(tb, xc, targetName), atom(tb, xc, "TARGETS")
	if err := xproto.SetSelectionOwnerChecked(xc, win, sel, xproto.TimeCurrentTime).Check(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		for {
			ev, err := xc.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			req, ok := ev.(xproto.SelectionRequestEvent)
			if !ok || !answer {
				continue
			}
			prop := req.Property
			switch req.Target {
			case utf8s:
				xproto.ChangeProperty(xc, xproto.PropModeReplace, req.Requestor, prop, utf8s, 8, uint32(len(data)), data)
			case targets:
				b := make([]byte, 8)
				xgb.Put32(b, uint32(targets))
				xgb.Put32(b[4:], uint32(utf8s))
				xproto.ChangeProperty(xc, xproto.PropModeReplace, req.Requestor, prop, xproto.AtomAtom, 32, 2, b)
			default:
				prop = xproto.AtomNone
			}
			n := xproto.SelectionNotifyEvent{Time: req.Time, Requestor: req.Requestor, Selection: req.Selection, Target: req.Target, Property: prop}
			xproto.SendEvent(xc, false, req.Requestor, 0, string(n.Bytes()))
		}
	}()
}

func TestClipboardSetIsPastedByPrograms(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "clip", 320, 240)
	xc := clientConn(t, s, "clip")
	ctx := ctxT(t)

	const text = "Grüße, 世界 ✓ — naïve café 😀\nsecond line"
	if _, err := c.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: "clip", Text: text}); err != nil {
		t.Fatal(err)
	}
	if typ, got := readSelection(t, xc, "CLIPBOARD", "UTF8_STRING"); typ != "UTF8_STRING" || string(got) != text {
		t.Fatalf("CLIPBOARD as UTF8_STRING: %s %q, want %q", typ, got, text)
	}
	// Programs that only know Latin-1 get it, with '?' for what it lacks.
	if typ, got := readSelection(t, xc, "CLIPBOARD", "STRING"); typ != "STRING" || string(got) != "Gr\xfc\xdfe, ?? ? ? na\xefve caf\xe9 ?\nsecond line" {
		t.Fatalf("CLIPBOARD as STRING: %s %q", typ, got)
	}
	typ, got := readSelection(t, xc, "CLIPBOARD", "TARGETS")
	var targets []string
	for i := 0; i+4 <= len(got); i += 4 {
		targets = append(targets, atomName(t, xc, xproto.Atom(xgb.Get32(got[i:]))))
	}
	if typ != "ATOM" || !strings.Contains(strings.Join(targets, " "), "UTF8_STRING") {
		t.Fatalf("TARGETS: %s %v", typ, targets)
	}
	// An image target is refused, as the owner of text must.
	if typ, _ := readSelection(t, xc, "CLIPBOARD", "image/png"); typ != "" {
		t.Fatalf("image/png answered with %s", typ)
	}
	// PRIMARY is a selection of its own.
	if typ, _ := readSelection(t, xc, "PRIMARY", "UTF8_STRING"); typ != "" {
		t.Fatalf("PRIMARY holds %s before it is set", typ)
	}
	if _, err := c.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: "clip", Text: "primary ü", Selection: displayv1.Selection_SELECTION_PRIMARY}); err != nil {
		t.Fatal(err)
	}
	if _, got := readSelection(t, xc, "PRIMARY", "UTF8_STRING"); string(got) != "primary ü" {
		t.Fatalf("PRIMARY %q", got)
	}
	if _, got := readSelection(t, xc, "CLIPBOARD", "UTF8_STRING"); string(got) != text {
		t.Fatalf("CLIPBOARD after setting PRIMARY: %q", got)
	}

	// Text over the 64 KiB a single property carries goes INCR.
	big := strings.Repeat("0123456789abcdé\n", 50000) // 850 kB
	if _, err := c.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: "clip", Text: big}); err != nil {
		t.Fatal(err)
	}
	if typ, got := readSelection(t, xc, "CLIPBOARD", "UTF8_STRING"); typ != "UTF8_STRING" || string(got) != big {
		t.Fatalf("INCR transfer: %s, %d bytes, want %d equal", typ, len(got), len(big))
	}
	// And reading it back gives the same.
	resp, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "clip"})
	if err != nil || resp.GetText() != big || !resp.GetOwned() || resp.GetTruncated() {
		t.Fatalf("read back: %d bytes owned=%v truncated=%v, %v", len(resp.GetText()), resp.GetOwned(), resp.GetTruncated(), err)
	}
}

func TestClipboardReadsWhatAProgramCopied(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "copy", 320, 240)
	ctx := ctxT(t)

	resp, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "copy"})
	if err != nil || resp.GetOwned() || resp.GetText() != "" {
		t.Fatalf("empty clipboard: %v, %v", resp, err)
	}

	const copied = "copied by a program: Ωmega ✓"
	ownSelection(t, clientConn(t, s, "copy"), "CLIPBOARD", copied, true)
	resp, err = c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "copy", Selection: displayv1.Selection_SELECTION_CLIPBOARD})
	if err != nil || resp.GetText() != copied || !resp.GetOwned() {
		t.Fatalf("clipboard: %v, %v; want %q", resp, err, copied)
	}
	ownSelection(t, clientConn(t, s, "copy"), "PRIMARY", "selected with the mouse", true)
	resp, err = c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "copy", Selection: displayv1.Selection_SELECTION_PRIMARY})
	if err != nil || resp.GetText() != "selected with the mouse" {
		t.Fatalf("primary: %v, %v", resp, err)
	}

	// Setting takes the selection from the program; the program's copy is
	// replaced, as copying in another program does.
	if _, err := c.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: "copy", Text: "ours"}); err != nil {
		t.Fatal(err)
	}
	resp, err = c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "copy"})
	if err != nil || resp.GetText() != "ours" {
		t.Fatalf("after set: %v, %v", resp, err)
	}
	// And a program copying again takes it back.
	ownSelection(t, clientConn(t, s, "copy"), "CLIPBOARD", "theirs again", true)
	resp, err = c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "copy"})
	if err != nil || resp.GetText() != "theirs again" {
		t.Fatalf("after a program copied: %v, %v", resp, err)
	}
}

func TestClipboardBadInput(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "bad", 320, 240)
	ctx := ctxT(t)
	for _, tc := range []struct {
		name string
		req  *displayv1.SetClipboardRequest
		want codes.Code
	}{
		{"over 1 MiB", &displayv1.SetClipboardRequest{SessionId: "bad", Text: strings.Repeat("x", 1<<20+1)}, codes.InvalidArgument},
		{"unknown selection", &displayv1.SetClipboardRequest{SessionId: "bad", Text: "x", Selection: 7}, codes.InvalidArgument},
		{"negative lease", &displayv1.SetClipboardRequest{SessionId: "bad", Text: "x", LeaseToken: -1}, codes.InvalidArgument},
		{"unknown session", &displayv1.SetClipboardRequest{SessionId: "nope", Text: "x"}, codes.NotFound},
	} {
		if _, err := c.SetClipboard(ctx, tc.req); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Nothing half-done: the refused text is not on the clipboard.
	if resp, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "bad"}); err != nil || resp.GetOwned() {
		t.Fatalf("after refused sets: %v, %v", resp, err)
	}
	// Exactly 1 MiB is taken.
	if _, err := c.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: "bad", Text: strings.Repeat("y", 1<<20)}); err != nil {
		t.Fatal(err)
	}
	// A program that holds the clipboard and never answers: a clear error,
	// in bounded time.
	ownSelection(t, clientConn(t, s, "bad"), "CLIPBOARD", "", false)
	_, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "bad"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "did not hand its text over") {
		t.Fatalf("unresponsive owner: %v", err)
	}
	// A caller's deadline shorter than the wait is the caller's.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.GetClipboard(short, &displayv1.GetClipboardRequest{SessionId: "bad"}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("short deadline: %v", err)
	}
	// The service still works afterwards.
	if _, err := c.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: "bad", Text: "fine"}); err != nil {
		t.Fatal(err)
	}
	if resp, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "bad"}); err != nil || resp.GetText() != "fine" {
		t.Fatalf("after the unresponsive owner: %v, %v", resp, err)
	}
}

// A paste action puts the text on the clipboard and presses the chord; the
// focused program sees the chord and pastes exactly the text.
func TestTypePaste(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "paste", 320, 240)
	ctx := ctxT(t)
	xc := clientConn(t, s, "paste")
	win := showWindow(t, xc, 0, 0, 100, 100, 0x202020, xproto.EventMaskKeyPress)
	if err := xproto.SetInputFocusChecked(xc, xproto.InputFocusParent, win, xproto.TimeCurrentTime).Check(); err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("Привет, 世界! ✓ ", 1500) // 33 kB, 22500 characters: past what typing takes
	paste := func(chord string) error {
		_, err := c.PerformActions(ctx, &displayv1.PerformActionsRequest{SessionId: "paste", Actions: []*displayv1.Action{
			{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: text, Paste: true, PasteChord: chord}}},
		}})
		return err
	}
	// Nothing on the clipboard before: nothing after.
	pasteAndRead := func(chord string, state uint16) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- paste(chord) }()
		// The chord's last key, pressed with exactly its modifiers held;
		// then the test reads CLIPBOARD, as a program pasting does.
		nextEvent(t, xc, func(e xproto.KeyPressEvent) bool {
			return e.State&(xproto.ModMaskControl|xproto.ModMaskShift) == state
		})
		if _, got := readSelection(t, xc, "CLIPBOARD", "UTF8_STRING"); string(got) != text {
			t.Fatalf("pasted %d bytes, want the %d typed", len(got), len(text))
		}
		if err := <-done; err != nil {
			t.Fatalf("paste with %q: %v", chord, err)
		}
	}
	pasteAndRead("", xproto.ModMaskControl)
	if resp, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "paste"}); err != nil || resp.GetOwned() {
		t.Fatalf("clipboard after pasting onto an empty one: %v, %v", resp, err)
	}
	// What a program had copied is back after the paste.
	ownSelection(t, clientConn(t, s, "paste"), "CLIPBOARD", "copied before ✓", true)
	pasteAndRead("ctrl+shift+v", xproto.ModMaskControl|xproto.ModMaskShift)
	if resp, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "paste"}); err != nil || resp.GetText() != "copied before ✓" {
		t.Fatalf("clipboard after the paste: %v, %v", resp, err)
	}
	// So is an image.
	img := testPNG(t, 50, 50, 3)
	if _, err := c.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: "paste", MimeType: "image/png", Data: img}); err != nil {
		t.Fatal(err)
	}
	pasteAndRead("", xproto.ModMaskControl)
	if typ, got := readSelection(t, xc, "CLIPBOARD", "image/png"); typ != "image/png" || !bytes.Equal(got, img) {
		t.Fatalf("image after the paste: %s, %d bytes", typ, len(got))
	}
	// No program reads the text (nothing pastes): the paste still ends,
	// and the clipboard is restored.
	if err := paste(""); err != nil {
		t.Fatal(err)
	}
	if typ, got := readSelection(t, xc, "CLIPBOARD", "image/png"); typ != "image/png" || !bytes.Equal(got, img) {
		t.Fatalf("image after an unread paste: %s, %d bytes", typ, len(got))
	}
	for _, tc := range []struct {
		name string
		tt   *displayv1.TypeText
	}{
		{"chord without paste", &displayv1.TypeText{Text: "x", PasteChord: "ctrl+v"}},
		{"two chords", &displayv1.TypeText{Text: "x", Paste: true, PasteChord: "ctrl+v ctrl+v"}},
		{"unknown key", &displayv1.TypeText{Text: "x", Paste: true, PasteChord: "ctrl+nosuchkey"}},
		{"over 1 MiB", &displayv1.TypeText{Text: strings.Repeat("x", 1<<20+1), Paste: true}},
	} {
		_, err := c.PerformActions(ctx, &displayv1.PerformActionsRequest{SessionId: "paste", Actions: []*displayv1.Action{{Action: &displayv1.Action_Type{Type: tc.tt}}}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tc.name, err)
		}
	}
}

// testPNG encodes a w×h image of noise, so it compresses badly and its
// size is about 3·w·h bytes.
func testPNG(tb testing.TB, w, h int, seed int64) []byte {
	tb.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewSource(seed))
	r.Read(img.Pix)
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// A PNG image set on the clipboard is offered as image/png, and only that,
// and arrives byte-exact in a program that asks for it, past the 64 KiB a
// single property carries (INCR); an image a program copies is read back
// byte-exact.
func TestClipboardImage(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "img", 320, 240)
	xc := clientConn(t, s, "img")
	ctx := ctxT(t)

	big := testPNG(t, 400, 300, 1) // about 480 kB
	if _, err := c.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: "img", MimeType: "image/png", Data: big}); err != nil {
		t.Fatal(err)
	}
	if typ, got := readSelection(t, xc, "CLIPBOARD", "image/png"); typ != "image/png" || !bytes.Equal(got, big) {
		t.Fatalf("CLIPBOARD as image/png: %s, %d bytes, want %d equal", typ, len(got), len(big))
	}
	typ, got := readSelection(t, xc, "CLIPBOARD", "TARGETS")
	var targets []string
	for i := 0; i+4 <= len(got); i += 4 {
		targets = append(targets, atomName(t, xc, xproto.Atom(xgb.Get32(got[i:]))))
	}
	if typ != "ATOM" || strings.Join(targets, " ") != "TARGETS TIMESTAMP image/png" {
		t.Fatalf("TARGETS of an image: %s %v", typ, targets)
	}
	// No text is offered for an image.
	if typ, _ := readSelection(t, xc, "CLIPBOARD", "UTF8_STRING"); typ != "" {
		t.Fatalf("UTF8_STRING answered with %s for an image", typ)
	}
	resp, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "img", MimeType: "image/png"})
	if err != nil || !bytes.Equal(resp.GetData(), big) || !resp.GetOwned() || resp.GetMimeType() != "image/png" {
		t.Fatalf("read back: %d bytes owned=%v %q, %v", len(resp.GetData()), resp.GetOwned(), resp.GetMimeType(), err)
	}
	// Asking for text when an image is there: a clear error.
	if _, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "img"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("text of an image: %v", err)
	}

	// An image a program copies to PRIMARY.
	copied := testPNG(t, 120, 100, 2) // about 48 kB, in one property
	ownSelectionAs(t, clientConn(t, s, "img"), "PRIMARY", "image/png", copied, true)
	resp, err = c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "img", Selection: displayv1.Selection_SELECTION_PRIMARY, MimeType: "image/png"})
	if err != nil || !bytes.Equal(resp.GetData(), copied) || !resp.GetOwned() {
		t.Fatalf("copied image: %d bytes, %v; want %d", len(resp.GetData()), err, len(copied))
	}
	if _, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "img", Selection: displayv1.Selection_SELECTION_PRIMARY}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("text of a copied image: %v", err)
	}
	// A program holding text has no image.
	ownSelection(t, clientConn(t, s, "img"), "CLIPBOARD", "just text", true)
	if _, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "img", MimeType: "image/png"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("image of text: %v", err)
	}

	for _, tc := range []struct {
		name string
		req  *displayv1.SetClipboardRequest
	}{
		{"over 8 MiB", &displayv1.SetClipboardRequest{SessionId: "img", MimeType: "image/png", Data: append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 8<<20)...)}},
		{"not a PNG", &displayv1.SetClipboardRequest{SessionId: "img", MimeType: "image/png", Data: []byte("GIF89a")}},
		{"image in text", &displayv1.SetClipboardRequest{SessionId: "img", MimeType: "image/png", Text: "x"}},
		{"data without the type", &displayv1.SetClipboardRequest{SessionId: "img", Data: copied}},
		{"unknown type", &displayv1.SetClipboardRequest{SessionId: "img", MimeType: "image/gif", Data: copied}},
	} {
		if _, err := c.SetClipboard(ctx, tc.req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tc.name, err)
		}
	}
	if _, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "img", MimeType: "text/html"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("get text/html: %v", err)
	}
	// Nothing half-done: the program's text is still there.
	if resp, err := c.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "img"}); err != nil || resp.GetText() != "just text" {
		t.Fatalf("after refused sets: %v, %v", resp, err)
	}
}
