// Package selection reads and sets the text of an X display's selections
// (CLIPBOARD, PRIMARY) through the X selection protocol (ICCCM section 2),
// as any program on the display does: it owns a selection to offer text and
// asks a selection's owner to convert it to read it. Large text goes in
// INCR chunks both ways.
//
// The connection's events are read by its owner, which passes every event
// to Handle; Handle never waits for a reply, so it is safe on the event
// reader's goroutine.
package selection

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	"github.com/deskgrid/deskgrid/services/display/internal/xconn"
)

// MaxBytes bounds the text set, and read, in one call.
const MaxBytes = 1 << 20

// MaxImageBytes bounds a PNG image set, and read, in one call.
const MaxImageBytes = 8 << 20

// PNG is the MIME type, and X target, of an image on a selection.
const PNG = "image/png"

// chunk is the size above which text goes INCR, in pieces of this size:
// well under the core protocol's request limit (256 KiB).
const chunk = 64 << 10

// ErrNoText is a selection whose owner offers no text.
var ErrNoText = errors.New("the selection's owner offers no text")

// ErrNoImage is a selection whose owner offers no image/png.
var ErrNoImage = errors.New("the selection's owner offers no image/png")

// ErrTooLarge is an image longer than MaxImageBytes.
var ErrTooLarge = errors.New("the image is larger than the limit")

// ErrNotOwned is a selection the service could not take: another program
// took it at once, or the server refused.
var ErrNotOwned = errors.New("could not take the selection")

// Name is a selection: CLIPBOARD or PRIMARY.
type Name int

const (
	Clipboard Name = iota
	Primary
)

func (n Name) String() string {
	if n == Primary {
		return "PRIMARY"
	}
	return "CLIPBOARD"
}

// Text is what a selection held when read.
type Text struct {
	Text string
	// Owned: some program held the selection.
	Owned bool
	// Truncated: the text was longer than MaxBytes and is cut there.
	Truncated bool
}

// Selections offers and reads text on one display.
type Selections struct {
	c   *xgb.Conn
	win xproto.Window

	atoms atoms

	mu sync.Mutex
	// owned is the text offered per selection atom, while this service
	// owns it; time is when it took it.
	owned map[xproto.Atom]offer
	// sends are INCR transfers in progress, by requestor window and property.
	sends map[sendKey]*send

	// getMu makes one read at a time, so the notifications below are for it.
	getMu    sync.Mutex
	notified chan xproto.SelectionNotifyEvent
	newValue chan xproto.PropertyNotifyEvent
}

type atoms struct {
	clipboard, primary, targets, timestamp          xproto.Atom
	utf8, text, incr, mimeUTF8, mimePlain, transfer xproto.Atom
	timeProbe, atom, integer, stringA               xproto.Atom
	png                                             xproto.Atom
}

// offer is what the service offers on a selection: text, or a PNG image
// when png is not nil.
type offer struct {
	text string
	png  []byte
	time xproto.Timestamp
	// served is closed once a program has received the content in full.
	served *servedOnce
}

type servedOnce struct {
	once sync.Once
	ch   chan struct{}
}

func newServed() *servedOnce { return &servedOnce{ch: make(chan struct{})} }

func (o *servedOnce) done() {
	if o != nil {
		o.once.Do(func() { close(o.ch) })
	}
}

type sendKey struct {
	win  xproto.Window
	prop xproto.Atom
}

type send struct {
	typ    xproto.Atom
	data   []byte
	off    int
	served *servedOnce
}

// New creates the unmapped window that owns and requests selections on c.
func New(c *xgb.Conn, root xproto.Window) (*Selections, error) {
	s := &Selections{
		c:        c,
		owned:    map[xproto.Atom]offer{},
		sends:    map[sendKey]*send{},
		notified: make(chan xproto.SelectionNotifyEvent, 4),
		newValue: make(chan xproto.PropertyNotifyEvent, 16),
	}
	names := map[string]*xproto.Atom{
		"CLIPBOARD":                &s.atoms.clipboard,
		"TARGETS":                  &s.atoms.targets,
		"TIMESTAMP":                &s.atoms.timestamp,
		"UTF8_STRING":              &s.atoms.utf8,
		"TEXT":                     &s.atoms.text,
		"INCR":                     &s.atoms.incr,
		"text/plain;charset=utf-8": &s.atoms.mimeUTF8,
		"text/plain":               &s.atoms.mimePlain,
		"DESKGRID_SELECTION":       &s.atoms.transfer,
		"DESKGRID_TIME":            &s.atoms.timeProbe,
		PNG:                        &s.atoms.png,
	}
	if err := xconn.InternAtoms(c, names); err != nil {
		return nil, err
	}
	s.atoms.primary, s.atoms.atom, s.atoms.integer, s.atoms.stringA = xproto.AtomPrimary, xproto.AtomAtom, xproto.AtomInteger, xproto.AtomString

	wid, err := xproto.NewWindowId(c)
	if err != nil {
		return nil, fmt.Errorf("selection window id: %w", err)
	}
	screen := xproto.Setup(c).DefaultScreen(c)
	// Never mapped, so no window manager or listing sees it.
	if err := xproto.CreateWindowChecked(c, 0, wid, root, -10, -10, 1, 1, 0,
		xproto.WindowClassInputOnly, screen.RootVisual,
		xproto.CwOverrideRedirect|xproto.CwEventMask,
		[]uint32{1, xproto.EventMaskPropertyChange}).Check(); err != nil {
		return nil, fmt.Errorf("create selection window: %w", err)
	}
	s.win = wid
	return s, nil
}

// Window is the window that owns and requests selections.
func (s *Selections) Window() xproto.Window { return s.win }

func (s *Selections) atomOf(n Name) xproto.Atom {
	if n == Primary {
		return s.atoms.primary
	}
	return s.atoms.clipboard
}

// Handle takes the events of the connection that concern selections and
// reports whether ev was one. It never waits for a reply.
func (s *Selections) Handle(ev xgb.Event) bool {
	switch e := ev.(type) {
	case xproto.SelectionRequestEvent:
		if e.Owner != s.win {
			return false
		}
		s.serve(e)
		return true
	case xproto.SelectionClearEvent:
		if e.Owner != s.win {
			return false
		}
		s.mu.Lock()
		if o, ok := s.owned[e.Selection]; ok && e.Time >= o.time {
			delete(s.owned, e.Selection)
		}
		s.mu.Unlock()
		return true
	case xproto.SelectionNotifyEvent:
		if e.Requestor != s.win {
			return false
		}
		select {
		case s.notified <- e:
		default: // nobody is waiting: a late answer to a read given up
		}
		return true
	case xproto.PropertyNotifyEvent:
		if e.Window == s.win {
			if e.State == xproto.PropertyNewValue {
				select {
				case s.newValue <- e:
				default:
				}
			}
			return true
		}
		if e.State == xproto.PropertyDelete {
			return s.continueSend(sendKey{e.Window, e.Atom})
		}
	}
	return false
}

// serve answers a program asking for a selection this service owns.
func (s *Selections) serve(e xproto.SelectionRequestEvent) {
	prop := e.Property
	if prop == xproto.AtomNone {
		prop = e.Target // an obsolete client (ICCCM 2.2)
	}
	s.mu.Lock()
	o, ok := s.owned[e.Selection]
	s.mu.Unlock()
	if !ok || (e.Time != xproto.TimeCurrentTime && e.Time < o.time) {
		s.notify(e, xproto.AtomNone)
		return
	}
	a := s.atoms
	put := func(typ xproto.Atom, format byte, data []byte) {
		xproto.ChangeProperty(s.c, xproto.PropModeReplace, e.Requestor, prop, typ, format, uint32(len(data))/uint32(format/8), data)
	}
	isImage := o.png != nil
	switch {
	case e.Target == a.targets:
		list := []xproto.Atom{a.targets, a.timestamp, a.utf8, a.mimeUTF8, a.text, a.stringA, a.mimePlain}
		if isImage {
			list = []xproto.Atom{a.targets, a.timestamp, a.png}
		}
		b := make([]byte, 4*len(list))
		for i, t := range list {
			xgb.Put32(b[4*i:], uint32(t))
		}
		put(a.atom, 32, b)
	case e.Target == a.timestamp:
		b := make([]byte, 4)
		xgb.Put32(b, uint32(o.time))
		put(a.integer, 32, b)
	case isImage && e.Target == a.png:
		s.sendText(e.Requestor, prop, a.png, o.png, o.served)
	case isImage:
		s.notify(e, xproto.AtomNone)
		return
	case e.Target == a.utf8 || e.Target == a.text || e.Target == a.mimeUTF8:
		typ := e.Target
		if typ == a.text {
			typ = a.utf8
		}
		s.sendText(e.Requestor, prop, typ, []byte(o.text), o.served)
	case e.Target == a.stringA || e.Target == a.mimePlain:
		s.sendText(e.Requestor, prop, e.Target, toLatin1(o.text), o.served)
	default:
		s.notify(e, xproto.AtomNone)
		return
	}
	s.notify(e, prop)
}

// sendText puts data on the requestor's property, in INCR chunks when it
// is large: the requestor deletes the property to ask for each next one.
func (s *Selections) sendText(req xproto.Window, prop, typ xproto.Atom, data []byte, served *servedOnce) {
	if len(data) <= chunk {
		xproto.ChangeProperty(s.c, xproto.PropModeReplace, req, prop, typ, 8, uint32(len(data)), data)
		served.done()
		return
	}
	s.mu.Lock()
	s.sends[sendKey{req, prop}] = &send{typ: typ, data: data, served: served}
	s.mu.Unlock()
	// The deletions come as PropertyNotify on the requestor's window.
	xproto.ChangeWindowAttributes(s.c, req, xproto.CwEventMask, []uint32{xproto.EventMaskPropertyChange})
	b := make([]byte, 4)
	xgb.Put32(b, uint32(len(data)))
	xproto.ChangeProperty(s.c, xproto.PropModeReplace, req, prop, s.atoms.incr, 32, 1, b)
}

// continueSend writes the next INCR chunk once the requestor deleted the
// last; a zero-length chunk ends the transfer.
func (s *Selections) continueSend(k sendKey) bool {
	s.mu.Lock()
	t, ok := s.sends[k]
	if !ok {
		s.mu.Unlock()
		return false
	}
	n := min(chunk, len(t.data)-t.off)
	piece := t.data[t.off : t.off+n]
	t.off += n
	if n == 0 {
		delete(s.sends, k)
	}
	s.mu.Unlock()
	xproto.ChangeProperty(s.c, xproto.PropModeReplace, k.win, k.prop, t.typ, 8, uint32(len(piece)), piece)
	if n == 0 {
		xproto.ChangeWindowAttributes(s.c, k.win, xproto.CwEventMask, []uint32{0})
		t.served.done()
	}
	return true
}

func (s *Selections) notify(e xproto.SelectionRequestEvent, prop xproto.Atom) {
	ev := xproto.SelectionNotifyEvent{Time: e.Time, Requestor: e.Requestor, Selection: e.Selection, Target: e.Target, Property: prop}
	xproto.SendEvent(s.c, false, e.Requestor, 0, string(ev.Bytes()))
}

// Set makes this service the owner of the selection, offering text. The
// caller checks the size.
func (s *Selections) Set(ctx context.Context, n Name, text string) error {
	_, err := s.set(ctx, n, offer{text: text})
	return err
}

// SetServed is Set, and returns a channel closed once a program has
// received the text in full (a paste has read it).
func (s *Selections) SetServed(ctx context.Context, n Name, text string) (<-chan struct{}, error) {
	o := offer{text: text, served: newServed()}
	if _, err := s.set(ctx, n, o); err != nil {
		return nil, err
	}
	return o.served.ch, nil
}

// SetImage makes this service the owner of the selection, offering a PNG
// image as image/png. The caller checks the size and format.
func (s *Selections) SetImage(ctx context.Context, n Name, png []byte) error {
	if png == nil {
		png = []byte{}
	}
	_, err := s.set(ctx, n, offer{png: png})
	return err
}

// Saved is what a selection held, as Save found it, for Restore.
type Saved struct {
	n Name
	// valid: what the selection held was read in full.
	valid bool
	owned bool
	o     offer
}

// Save reads what the selection holds now (text, else a PNG image), so
// that Restore can put it back after the selection is used for something
// else. A selection whose owner offers neither, or does not answer, is
// saved as empty.
//
// Save is only as good as the owner's conversions: what the owner offers
// besides text or a PNG (rich text, files) is not kept.
func (s *Selections) Save(ctx context.Context, n Name) Saved {
	t, err := s.Get(ctx, n)
	if err == nil {
		return Saved{n: n, valid: !t.Truncated, owned: t.Owned, o: offer{text: t.Text}}
	}
	if img, err := s.GetImage(ctx, n); err == nil && img != nil {
		return Saved{n: n, valid: true, owned: true, o: offer{png: img}}
	}
	return Saved{n: n}
}

// Restore offers again what Save read, or gives the selection up when it
// was empty. What Save could not read in full is not restored.
func (s *Selections) Restore(ctx context.Context, sv Saved) error {
	if !sv.valid {
		return nil
	}
	if !sv.owned {
		// It was empty: give it up, if it is still this service's.
		s.getMu.Lock()
		defer s.getMu.Unlock()
		t, err := s.serverTime(ctx)
		if err != nil {
			return err
		}
		sel := s.atomOf(sv.n)
		s.mu.Lock()
		_, ours := s.owned[sel]
		delete(s.owned, sel)
		s.mu.Unlock()
		if ours {
			r, err := xproto.GetSelectionOwner(s.c, sel).Reply()
			if err == nil && r.Owner == s.win {
				xproto.SetSelectionOwner(s.c, xproto.WindowNone, sel, t)
			}
		}
		return nil
	}
	_, err := s.set(ctx, sv.n, sv.o)
	return err
}

func (s *Selections) set(ctx context.Context, n Name, o offer) (offer, error) {
	s.getMu.Lock()
	defer s.getMu.Unlock()
	t, err := s.serverTime(ctx)
	if err != nil {
		return o, err
	}
	sel := s.atomOf(n)
	s.mu.Lock()
	o.time = t
	s.owned[sel] = o
	s.mu.Unlock()
	xproto.SetSelectionOwner(s.c, s.win, sel, t)
	r, err := xproto.GetSelectionOwner(s.c, sel).Reply()
	if err != nil {
		return o, fmt.Errorf("read %s owner: %w", n, err)
	}
	if r.Owner != s.win {
		s.mu.Lock()
		delete(s.owned, sel)
		s.mu.Unlock()
		return o, fmt.Errorf("%s: %w", n, ErrNotOwned)
	}
	return o, nil
}

// serverTime is the server's time now, from the PropertyNotify of an
// empty append to the window's own property (ICCCM 2.1: a selection is
// never taken at CurrentTime).
func (s *Selections) serverTime(ctx context.Context) (xproto.Timestamp, error) {
	s.drain()
	xproto.ChangeProperty(s.c, xproto.PropModeAppend, s.win, s.atoms.timeProbe, s.atoms.stringA, 8, 0, nil)
	for {
		select {
		case e := <-s.newValue:
			if e.Atom == s.atoms.timeProbe {
				return e.Time, nil
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for the X server's time: %w", ctx.Err())
		}
	}
}

func (s *Selections) drain() {
	for {
		select {
		case <-s.notified:
		case <-s.newValue:
		default:
			return
		}
	}
}

// Get reads the selection's text from its owner, as UTF8_STRING, else as
// STRING. ctx bounds the wait for an owner that does not answer.
func (s *Selections) Get(ctx context.Context, n Name) (Text, error) {
	s.getMu.Lock()
	defer s.getMu.Unlock()
	sel := s.atomOf(n)
	r, err := xproto.GetSelectionOwner(s.c, sel).Reply()
	if err != nil {
		return Text{}, fmt.Errorf("read %s owner: %w", n, err)
	}
	if r.Owner == xproto.WindowNone {
		return Text{}, nil
	}
	if r.Owner == s.win {
		s.mu.Lock()
		o, ok := s.owned[sel]
		s.mu.Unlock()
		if ok && o.png == nil {
			return Text{Text: o.text, Owned: true}, nil
		}
		if ok {
			return Text{Owned: true}, fmt.Errorf("%s: %w", n, ErrNoText)
		}
	}
	for _, target := range []xproto.Atom{s.atoms.utf8, s.atoms.stringA} {
		t, err := s.convert(ctx, n, sel, target)
		if errors.Is(err, ErrNoText) {
			continue
		}
		return t, err
	}
	return Text{Owned: true}, fmt.Errorf("%s: %w", n, ErrNoText)
}

// GetImage reads the selection as image/png from its owner: nil when no
// program holds the selection, ErrNoImage when its owner offers no PNG,
// ErrTooLarge when the image is over MaxImageBytes.
func (s *Selections) GetImage(ctx context.Context, n Name) ([]byte, error) {
	s.getMu.Lock()
	defer s.getMu.Unlock()
	sel := s.atomOf(n)
	r, err := xproto.GetSelectionOwner(s.c, sel).Reply()
	if err != nil {
		return nil, fmt.Errorf("read %s owner: %w", n, err)
	}
	if r.Owner == xproto.WindowNone {
		return nil, nil
	}
	if r.Owner == s.win {
		s.mu.Lock()
		o, ok := s.owned[sel]
		s.mu.Unlock()
		if ok && o.png != nil {
			return o.png, nil
		}
		if ok {
			return nil, fmt.Errorf("%s: %w", n, ErrNoImage)
		}
	}
	data, typ, truncated, err := s.fetch(ctx, n, sel, s.atoms.png, MaxImageBytes)
	switch {
	case errors.Is(err, errRefused):
		return nil, fmt.Errorf("%s: %w", n, ErrNoImage)
	case err != nil:
		return nil, err
	case truncated:
		return nil, fmt.Errorf("%s: %w (%d bytes)", n, ErrTooLarge, MaxImageBytes)
	case typ != s.atoms.png:
		return nil, fmt.Errorf("%s: %w", n, ErrNoImage)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// errRefused is an owner that answered a conversion with no property.
var errRefused = errors.New("conversion refused")

// convert asks the owner for the selection as target and reads the answer.
func (s *Selections) convert(ctx context.Context, n Name, sel, target xproto.Atom) (Text, error) {
	data, typ, truncated, err := s.fetch(ctx, n, sel, target, MaxBytes)
	if errors.Is(err, errRefused) {
		return Text{}, ErrNoText
	}
	if err != nil {
		return Text{}, err
	}
	var text string
	switch typ {
	case s.atoms.stringA:
		text = fromLatin1(data)
	case s.atoms.utf8, s.atoms.mimeUTF8, s.atoms.text:
		if truncated {
			data = cutUTF8(data)
		}
		text = strings.ToValidUTF8(string(data), "\uFFFD")
	default:
		return Text{}, ErrNoText
	}
	return Text{Text: text, Owned: true, Truncated: truncated}, nil
}

// fetch asks the owner for the selection as target and reads the answer,
// up to limit bytes (truncated says it had more); errRefused is an owner
// that cannot convert to target.
func (s *Selections) fetch(ctx context.Context, n Name, sel, target xproto.Atom, limit int) ([]byte, xproto.Atom, bool, error) {
	s.drain()
	prop := s.atoms.transfer
	xproto.DeleteProperty(s.c, s.win, prop)
	xproto.ConvertSelection(s.c, s.win, sel, target, prop, xproto.TimeCurrentTime)
	var e xproto.SelectionNotifyEvent
	for {
		select {
		case e = <-s.notified:
		case <-ctx.Done():
			return nil, 0, false, fmt.Errorf("the program holding %s did not answer: %w", n, ctx.Err())
		}
		if e.Selection == sel && e.Target == target {
			break
		}
	}
	if e.Property == xproto.AtomNone {
		return nil, 0, false, errRefused
	}
	p, err := xproto.GetProperty(s.c, false, s.win, prop, xproto.GetPropertyTypeAny, 0, uint32(limit/4+1)).Reply()
	if err != nil {
		return nil, 0, false, fmt.Errorf("read %s: %w", n, err)
	}
	var data []byte
	truncated := false
	typ := p.Type
	if p.Type == s.atoms.incr {
		data, typ, truncated, err = s.receiveIncr(ctx, n, prop, limit)
		if err != nil {
			return nil, 0, false, err
		}
	} else {
		xproto.DeleteProperty(s.c, s.win, prop)
		data = p.Value
		truncated = p.BytesAfter > 0
	}
	if len(data) > limit {
		data, truncated = data[:limit], true
	}
	return data, typ, truncated, nil
}

// receiveIncr reads an INCR transfer: delete the property, and each time
// the owner writes it again, read and delete it, until it writes nothing.
func (s *Selections) receiveIncr(ctx context.Context, n Name, prop xproto.Atom, limit int) ([]byte, xproto.Atom, bool, error) {
	// The owner wrote INCR before it notified, so that write's event is
	// queued already: not a chunk.
	s.drain()
	xproto.DeleteProperty(s.c, s.win, prop)
	var data []byte
	var typ xproto.Atom
	for {
		select {
		case e := <-s.newValue:
			if e.Atom != prop {
				continue
			}
		case <-ctx.Done():
			return nil, 0, false, fmt.Errorf("the program holding %s stopped sending: %w", n, ctx.Err())
		}
		p, err := xproto.GetProperty(s.c, true, s.win, prop, xproto.GetPropertyTypeAny, 0, (chunk+4096)/4).Reply()
		if err != nil {
			return nil, 0, false, fmt.Errorf("read %s: %w", n, err)
		}
		if p.ValueLen == 0 && p.BytesAfter == 0 {
			return data, typ, false, nil
		}
		typ = p.Type
		data = append(data, p.Value...)
		if len(data) > limit {
			// Left unfinished: the owner gives the transfer up when
			// nobody deletes the property any more.
			return data, typ, true, nil
		}
	}
}

func toLatin1(s string) []byte {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			r = '?'
		}
		b = append(b, byte(r))
	}
	return b
}

func fromLatin1(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

// cutUTF8 drops a character cut in two at the end of b.
func cutUTF8(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size != 1 {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}
