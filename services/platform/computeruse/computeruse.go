// Package computeruse decodes the computer-use tool calls of model
// providers into display actions, so a model of any of them drives the same
// display:
//
//   - Anthropic's computer tool (computer_20250124 and computer_20251124,
//     zoom included), one action per call;
//   - OpenAI's computer_call actions, one action object or a batch of them;
//   - Gemini's Computer Use functions (click_at, type_text_at, navigate...),
//     whose coordinates are on a 0-999 grid.
//
// Decode returns a Plan: the actions to perform, in display coordinates
// (Scale maps the model's coordinates and clamps them to the screen), and
// what the model gets back: a screenshot, the pointer position, or a zoomed
// region. Plan.Request turns it into the PerformActions request the display
// runs. A call the model must correct is an error wrapping ErrInvalid, with
// a message meant for the model; nothing of such a call is performed.
//
// Key names are checked with services/platform/keysym, the table the
// display presses them with, so a key the display would refuse is refused
// here, before anything of the call runs.
package computeruse

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/keysym"
)

// ErrInvalid marks a tool call the model must correct; report it to the
// model as the tool's error (InvalidArgument at an API edge).
var ErrInvalid = errors.New("invalid computer-use action")

// Dialect says how a computer tool call's input is spelled.
type Dialect string

// The dialects Decode reads.
const (
	Anthropic Dialect = "anthropic"
	OpenAI    Dialect = "openai"
	Gemini    Dialect = "gemini"
)

// Limits, matching what the display accepts.
const (
	// MaxDuration bounds hold_key and wait.
	MaxDuration = 100 * time.Second
	// MaxScrollClicks bounds a scroll, in wheel clicks.
	MaxScrollClicks = 100
	// MaxTextRunes bounds typed text.
	MaxTextRunes = 10000
	// MaxPathPoints bounds a drag path.
	MaxPathPoints = 10000
	// ScrollPixelsPerClick converts OpenAI's scroll distances and Gemini's
	// magnitudes, in pixels, into wheel clicks: a wheel click scrolls about
	// this far in browsers and toolkits. Any non-zero distance is at least
	// one click.
	ScrollPixelsPerClick = 100
	// GeminiScrollClicks is how far Gemini's scrolls go when they carry no
	// magnitude.
	GeminiScrollClicks = 5
	// OpenAIWait is how long OpenAI's wait action pauses when it carries no
	// duration of its own.
	OpenAIWait = time.Second
	// GeminiWait is how long wait_5_seconds pauses.
	GeminiWait = 5 * time.Second
	// GeminiGrid is the size of Gemini's coordinate grid (0-999).
	GeminiGrid = 1000
)

// Plan is what a computer call asks of the display.
type Plan struct {
	// Actions to perform, in display coordinates (see Scale). None for a
	// call that only looks (screenshot): take a Screenshot instead, as the
	// display refuses PerformActions without actions.
	Actions []*displayv1.Action
	// Screenshot: the call answers with a screenshot after the actions
	// (all but cursor_position); for a zoom the zoomed image stands in for
	// it, and Request asks for none.
	Screenshot bool
	// CursorOnly answers with the pointer position instead of a screenshot.
	CursorOnly bool
	// Zoom, when set, is the region (in display coordinates) to show at the
	// model's size instead of a screenshot.
	Zoom *displayv1.Rect
}

// Request is the PerformActions request that carries the plan out; the
// caller sets the session, lease and scale_to. size is the size the model
// sees a zoomed region at (nil: the region's own pixels). The answer is
// PerformActionsResponse.screenshot, .cursor, or .images[0] for a zoom.
func (p *Plan) Request(size *displayv1.Size) *displayv1.PerformActionsRequest {
	actions := p.Actions
	if p.Zoom != nil {
		// The display crops at full resolution, then fits the size.
		actions = append(append([]*displayv1.Action(nil), actions...), &displayv1.Action{Action: &displayv1.Action_Zoom{Zoom: &displayv1.Zoom{
			Region: p.Zoom, Size: size,
		}}})
	}
	return &displayv1.PerformActionsRequest{Actions: actions, Screenshot: p.Screenshot && p.Zoom == nil}
}

// Scale maps the model's coordinates to the display's. The zero Scale takes
// coordinates as they are and refuses negative ones; with the display's
// size known, coordinates are scaled from the model's size (or Gemini's
// grid) and clamped to the screen.
type Scale struct {
	DisplayW, DisplayH int
	// ModelW and ModelH: the screen size the model was told (zero: the
	// display's).
	ModelW, ModelH int
	// Normalized: coordinates are on a 0-999 grid (Gemini); Decode sets it
	// for the Gemini dialect.
	Normalized bool
}

func (s Scale) model() (float64, float64) {
	switch {
	case s.Normalized:
		return GeminiGrid, GeminiGrid
	case s.ModelW > 0 && s.ModelH > 0:
		return float64(s.ModelW), float64(s.ModelH)
	}
	return float64(s.DisplayW), float64(s.DisplayH)
}

// point maps a model coordinate pair to a display point.
func (s Scale) point(what string, x, y float64) (*displayv1.Point, error) {
	for _, v := range []float64{x, y} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v != math.Trunc(v) || math.Abs(v) > math.MaxInt32 {
			return nil, invalid("%s: %v is not a whole number of pixels", what, v)
		}
	}
	if s.DisplayW <= 0 || s.DisplayH <= 0 {
		if x < 0 || y < 0 {
			return nil, invalid("%s (%v, %v) is negative", what, x, y)
		}
		return &displayv1.Point{X: int32(x), Y: int32(y)}, nil
	}
	mw, mh := s.model()
	px := math.Floor(x * float64(s.DisplayW) / mw)
	py := math.Floor(y * float64(s.DisplayH) / mh)
	return &displayv1.Point{
		X: int32(min(max(px, 0), float64(s.DisplayW-1))),
		Y: int32(min(max(py, 0), float64(s.DisplayH-1))),
	}, nil
}

// ToModel maps a display point back to the model's coordinates.
func (s Scale) ToModel(p *displayv1.Point) (int, int) {
	if s.DisplayW <= 0 || s.DisplayH <= 0 {
		return int(p.GetX()), int(p.GetY())
	}
	mw, mh := s.model()
	return int(p.GetX()) * int(mw) / s.DisplayW, int(p.GetY()) * int(mh) / s.DisplayH
}

// Decode turns a computer tool call into a plan for the display. An empty
// dialect is Anthropic's.
func Decode(d Dialect, input json.RawMessage, sc Scale) (*Plan, error) {
	switch d {
	case Anthropic, "":
		return decodeAnthropic(input, sc)
	case OpenAI:
		return decodeOpenAI(input, sc)
	case Gemini:
		sc.Normalized = true
		return decodeGemini(input, sc)
	}
	return nil, invalid("unknown computer-use dialect %q", d)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// anthropicInput is the computer tool's input.
type anthropicInput struct {
	Action          string    `json:"action"`
	Coordinate      []float64 `json:"coordinate"`
	StartCoordinate []float64 `json:"start_coordinate"`
	Text            *string   `json:"text"`
	ScrollDirection string    `json:"scroll_direction"`
	ScrollAmount    *float64  `json:"scroll_amount"`
	Duration        *float64  `json:"duration"`
	Region          []float64 `json:"region"`
	Key             *string   `json:"key"`
}

func decodeAnthropic(input json.RawMessage, sc Scale) (*Plan, error) {
	var in anthropicInput
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, invalid("computer input is not valid JSON of the computer tool: %v", err)
	}
	// coord reads [x, y]; nil when absent and optional.
	coord := func(what string, v []float64, required bool) (*displayv1.Point, error) {
		if v == nil {
			if required {
				return nil, invalid("%s needs %s [x, y]", in.Action, what)
			}
			return nil, nil
		}
		if len(v) != 2 {
			return nil, invalid("%s must be [x, y]", what)
		}
		return sc.point(what, v[0], v[1])
	}
	p := &Plan{Screenshot: true}
	switch in.Action {
	case "screenshot":
	case "cursor_position":
		// The display answers PerformActions with the pointer position;
		// it refuses an empty action list.
		p.Screenshot, p.CursorOnly = false, true
		p.Actions = append(p.Actions, &displayv1.Action{Action: &displayv1.Action_CursorPosition{CursorPosition: &displayv1.CursorPosition{}}})
	case "mouse_move":
		at, err := coord("coordinate", in.Coordinate, true)
		if err != nil {
			return nil, err
		}
		if in.Text != nil {
			return nil, invalid("mouse_move takes no text")
		}
		p.Actions = append(p.Actions, move(at))
	case "left_click", "right_click", "middle_click", "double_click", "triple_click":
		at, err := coord("coordinate", in.Coordinate, false)
		if err != nil {
			return nil, err
		}
		hold, err := modifiers(in.Text)
		if err != nil {
			return nil, err
		}
		b, n := displayv1.MouseButton_MOUSE_BUTTON_LEFT, int32(1)
		switch in.Action {
		case "right_click":
			b = displayv1.MouseButton_MOUSE_BUTTON_RIGHT
		case "middle_click":
			b = displayv1.MouseButton_MOUSE_BUTTON_MIDDLE
		case "double_click":
			n = 2
		case "triple_click":
			n = 3
		}
		p.Actions = append(p.Actions, click(at, b, n, hold))
	case "left_click_drag":
		from, err := coord("start_coordinate", in.StartCoordinate, true)
		if err != nil {
			return nil, err
		}
		to, err := coord("coordinate", in.Coordinate, true)
		if err != nil {
			return nil, err
		}
		p.Actions = append(p.Actions, drag(from, to))
	case "left_mouse_down", "left_mouse_up":
		at, err := coord("coordinate", in.Coordinate, false)
		if err != nil {
			return nil, err
		}
		if at != nil {
			p.Actions = append(p.Actions, move(at))
		}
		p.Actions = append(p.Actions, &displayv1.Action{Action: &displayv1.Action_Button{Button: &displayv1.ButtonPress{
			Button: displayv1.MouseButton_MOUSE_BUTTON_LEFT, Down: in.Action == "left_mouse_down"}}})
	case "scroll":
		at, err := coord("coordinate", in.Coordinate, false)
		if err != nil {
			return nil, err
		}
		var dx, dy int32
		switch in.ScrollDirection {
		case "up":
			dy = -1
		case "down":
			dy = 1
		case "left":
			dx = -1
		case "right":
			dx = 1
		default:
			return nil, invalid("scroll_direction %q is not one of up, down, left, right", in.ScrollDirection)
		}
		if in.ScrollAmount == nil {
			return nil, invalid("scroll needs scroll_amount")
		}
		n := *in.ScrollAmount
		if n != math.Trunc(n) || n < 1 || n > MaxScrollClicks {
			return nil, invalid("scroll_amount %v is not a whole number of clicks in 1-%d", n, MaxScrollClicks)
		}
		hold, err := modifiers(in.Text)
		if err != nil {
			return nil, err
		}
		p.Actions = append(p.Actions, scroll(at, dx*int32(n), dy*int32(n), hold))
	case "key", "hold_key":
		// The keys are in text (or key); chords separated by spaces are
		// pressed one after the other.
		text := in.Text
		if text == nil {
			text = in.Key
		}
		if text == nil || strings.TrimSpace(*text) == "" {
			return nil, invalid("%s needs text naming the keys, such as ctrl+s, Return or shift", in.Action)
		}
		if _, err := keysym.ParseChords(*text); err != nil {
			return nil, invalid("%v", err)
		}
		if in.Action == "key" {
			for _, chord := range strings.Fields(*text) {
				p.Actions = append(p.Actions, key(chord, 0))
			}
			break
		}
		d, err := duration(in.Duration)
		if err != nil {
			return nil, err
		}
		p.Actions = append(p.Actions, key(*text, d))
	case "type":
		if in.Text == nil || *in.Text == "" {
			return nil, invalid("type needs text")
		}
		if err := checkText(*in.Text); err != nil {
			return nil, err
		}
		p.Actions = append(p.Actions, typeText(*in.Text))
	case "wait":
		d, err := duration(in.Duration)
		if err != nil {
			return nil, err
		}
		p.Actions = append(p.Actions, wait(d))
	case "zoom":
		if len(in.Region) != 4 {
			return nil, invalid("zoom needs region [x0, y0, x1, y1]")
		}
		a, err := sc.point("region", in.Region[0], in.Region[1])
		if err != nil {
			return nil, err
		}
		b, err := sc.point("region", in.Region[2], in.Region[3])
		if err != nil {
			return nil, err
		}
		if b.X <= a.X || b.Y <= a.Y {
			return nil, invalid("zoom region %v is empty on the screen: x1 and y1 must exceed x0 and y0", in.Region)
		}
		p.Zoom = &displayv1.Rect{X: a.X, Y: a.Y, Width: b.X - a.X, Height: b.Y - a.Y}
	case "":
		return nil, invalid("input has no action")
	default:
		return nil, invalid("unknown computer action %q", in.Action)
	}
	return p, nil
}

// openAIAction is an OpenAI computer_call action.
type openAIAction struct {
	Type    string   `json:"type"`
	Button  string   `json:"button"`
	X       *float64 `json:"x"`
	Y       *float64 `json:"y"`
	Path    []xy     `json:"path"`
	Keys    []string `json:"keys"`
	ScrollX *float64 `json:"scroll_x"`
	ScrollY *float64 `json:"scroll_y"`
	Text    *string  `json:"text"`
	Ms      *float64 `json:"ms"`
}

type xy struct {
	X *float64 `json:"x"`
	Y *float64 `json:"y"`
}

// decodeOpenAI decodes one computer_call action, or a batch of them run in
// order. Every OpenAI call is answered with a screenshot.
func decodeOpenAI(input json.RawMessage, sc Scale) (*Plan, error) {
	var list []openAIAction
	if trimmed := bytes.TrimSpace(input); len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(input, &list); err != nil {
			return nil, invalid("computer actions are not valid JSON of computer_call actions: %v", err)
		}
		if len(list) == 0 {
			return nil, invalid("computer_call has no actions")
		}
	} else {
		var one openAIAction
		if err := json.Unmarshal(input, &one); err != nil {
			return nil, invalid("computer action is not valid JSON of a computer_call action: %v", err)
		}
		list = []openAIAction{one}
	}
	p := &Plan{Screenshot: true}
	for _, in := range list {
		acts, err := openAIActions(in, sc)
		if err != nil {
			return nil, err
		}
		p.Actions = append(p.Actions, acts...)
	}
	return p, nil
}

func openAIActions(in openAIAction, sc Scale) ([]*displayv1.Action, error) {
	at := func() (*displayv1.Point, error) {
		if in.X == nil || in.Y == nil {
			return nil, invalid("%s needs x and y", in.Type)
		}
		return sc.point("x, y", *in.X, *in.Y)
	}
	held := func() ([]string, error) {
		var out []string
		for _, k := range in.Keys {
			name := openAIKey(k)
			if _, err := keysym.Name(name); err != nil {
				return nil, invalid("keys: %v", err)
			}
			out = append(out, name)
		}
		return out, nil
	}
	switch in.Type {
	case "screenshot":
		return nil, nil
	case "click", "double_click":
		p, err := at()
		if err != nil {
			return nil, err
		}
		hold, err := held()
		if err != nil {
			return nil, err
		}
		if in.Type == "double_click" {
			return []*displayv1.Action{click(p, displayv1.MouseButton_MOUSE_BUTTON_LEFT, 2, hold)}, nil
		}
		b := displayv1.MouseButton_MOUSE_BUTTON_LEFT
		switch in.Button {
		case "", "left":
		case "right":
			b = displayv1.MouseButton_MOUSE_BUTTON_RIGHT
		case "wheel", "middle":
			b = displayv1.MouseButton_MOUSE_BUTTON_MIDDLE
		case "back":
			b = displayv1.MouseButton_MOUSE_BUTTON_BACK
		case "forward":
			b = displayv1.MouseButton_MOUSE_BUTTON_FORWARD
		default:
			return nil, invalid("button %q is not one of left, right, wheel, back, forward", in.Button)
		}
		return []*displayv1.Action{click(p, b, 1, hold)}, nil
	case "move":
		p, err := at()
		if err != nil {
			return nil, err
		}
		return []*displayv1.Action{move(p)}, nil
	case "drag":
		if len(in.Path) < 2 {
			return nil, invalid("drag needs a path of at least two points")
		}
		if len(in.Path) > MaxPathPoints {
			return nil, invalid("drag path has %d points; at most %d", len(in.Path), MaxPathPoints)
		}
		path := make([]*displayv1.Point, 0, len(in.Path))
		for i, q := range in.Path {
			if q.X == nil || q.Y == nil {
				return nil, invalid("drag path point %d needs x and y", i)
			}
			p, err := sc.point("path point", *q.X, *q.Y)
			if err != nil {
				return nil, err
			}
			path = append(path, p)
		}
		return []*displayv1.Action{drag(path...)}, nil
	case "keypress":
		if len(in.Keys) == 0 {
			return nil, invalid("keypress needs keys")
		}
		chord, err := chordOf(in.Keys)
		if err != nil {
			return nil, err
		}
		return []*displayv1.Action{key(chord, 0)}, nil
	case "scroll":
		p, err := at()
		if err != nil {
			return nil, err
		}
		var sx, sy float64
		if in.ScrollX != nil {
			sx = *in.ScrollX
		}
		if in.ScrollY != nil {
			sy = *in.ScrollY
		}
		cx, cy := clicks(sx), clicks(sy)
		if cx == 0 && cy == 0 {
			return nil, invalid("scroll needs a non-zero scroll_x or scroll_y")
		}
		hold, err := held()
		if err != nil {
			return nil, err
		}
		return []*displayv1.Action{scroll(p, cx, cy, hold)}, nil
	case "type":
		if in.Text == nil || *in.Text == "" {
			return nil, invalid("type needs text")
		}
		if err := checkText(*in.Text); err != nil {
			return nil, err
		}
		return []*displayv1.Action{typeText(*in.Text)}, nil
	case "wait":
		d := OpenAIWait
		if in.Ms != nil {
			ms := *in.Ms
			if ms != math.Trunc(ms) || ms < 1 || ms > float64(MaxDuration.Milliseconds()) {
				return nil, invalid("wait ms %v is not a whole number in 1-%d", ms, MaxDuration.Milliseconds())
			}
			d = time.Duration(ms) * time.Millisecond
		}
		return []*displayv1.Action{wait(d)}, nil
	case "":
		return nil, invalid("action has no type")
	}
	return nil, invalid("unknown computer action %q", in.Type)
}

// geminiCall is a Gemini Computer Use function call.
type geminiCall struct {
	Name string `json:"name"`
	Args struct {
		X                 *float64 `json:"x"`
		Y                 *float64 `json:"y"`
		DestinationX      *float64 `json:"destination_x"`
		DestinationY      *float64 `json:"destination_y"`
		Text              *string  `json:"text"`
		PressEnter        *bool    `json:"press_enter"`
		ClearBeforeTyping *bool    `json:"clear_before_typing"`
		Keys              *string  `json:"keys"`
		Direction         string   `json:"direction"`
		Magnitude         *float64 `json:"magnitude"`
		URL               *string  `json:"url"`
	} `json:"args"`
}

// GeminiSearchPage is where Gemini's search function goes.
const GeminiSearchPage = "https://www.google.com"

func decodeGemini(input json.RawMessage, sc Scale) (*Plan, error) {
	var in geminiCall
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, invalid("computer call is not valid JSON of a Gemini function call: %v", err)
	}
	a := in.Args
	at := func(what string, x, y *float64) (*displayv1.Point, error) {
		if x == nil || y == nil {
			return nil, invalid("%s needs %s", in.Name, what)
		}
		return sc.point(what, *x, *y)
	}
	p := &Plan{Screenshot: true}
	add := func(acts ...*displayv1.Action) { p.Actions = append(p.Actions, acts...) }
	left := displayv1.MouseButton_MOUSE_BUTTON_LEFT
	switch in.Name {
	case "open_web_browser":
	case "wait_5_seconds":
		add(wait(GeminiWait))
	case "click_at", "hover_at":
		pt, err := at("x and y", a.X, a.Y)
		if err != nil {
			return nil, err
		}
		if in.Name == "hover_at" {
			add(move(pt))
		} else {
			add(click(pt, left, 1, nil))
		}
	case "type_text_at":
		pt, err := at("x and y", a.X, a.Y)
		if err != nil {
			return nil, err
		}
		var text string
		if a.Text != nil {
			text = *a.Text
		}
		if err := checkText(text); err != nil {
			return nil, err
		}
		add(click(pt, left, 1, nil))
		if a.ClearBeforeTyping == nil || *a.ClearBeforeTyping {
			add(key("ctrl+a", 0), key("BackSpace", 0))
		}
		if text != "" {
			add(typeText(text))
		}
		if a.PressEnter == nil || *a.PressEnter {
			add(key("Return", 0))
		}
	case "key_combination":
		if a.Keys == nil || strings.TrimSpace(*a.Keys) == "" {
			return nil, invalid("key_combination needs keys, such as control+c")
		}
		chord, err := chordOf(splitChord(*a.Keys))
		if err != nil {
			return nil, err
		}
		add(key(chord, 0))
	case "scroll_document", "scroll_at":
		var pt *displayv1.Point
		if in.Name == "scroll_at" {
			var err error
			if pt, err = at("x and y", a.X, a.Y); err != nil {
				return nil, err
			}
		} else if sc.DisplayW > 0 && sc.DisplayH > 0 {
			pt = &displayv1.Point{X: int32(sc.DisplayW / 2), Y: int32(sc.DisplayH / 2)}
		}
		n := int32(GeminiScrollClicks)
		if a.Magnitude != nil {
			if n = clicks(*a.Magnitude); n <= 0 {
				return nil, invalid("magnitude %v is not a positive distance", *a.Magnitude)
			}
		}
		var dx, dy int32
		switch a.Direction {
		case "up":
			dy = -n
		case "down":
			dy = n
		case "left":
			dx = -n
		case "right":
			dx = n
		default:
			return nil, invalid("direction %q is not one of up, down, left, right", a.Direction)
		}
		add(scroll(pt, dx, dy, nil))
	case "drag_and_drop":
		from, err := at("x and y", a.X, a.Y)
		if err != nil {
			return nil, err
		}
		to, err := at("destination_x and destination_y", a.DestinationX, a.DestinationY)
		if err != nil {
			return nil, err
		}
		add(drag(from, to))
	// Browser functions on a desktop: drive the focused browser by keys.
	case "go_back":
		add(key("alt+Left", 0))
	case "go_forward":
		add(key("alt+Right", 0))
	case "navigate", "search":
		u := GeminiSearchPage
		if in.Name == "navigate" {
			if a.URL == nil || *a.URL == "" {
				return nil, invalid("navigate needs url")
			}
			u = *a.URL
		}
		if err := checkText(u); err != nil {
			return nil, err
		}
		add(key("ctrl+l", 0), typeText(u), key("Return", 0))
	case "":
		return nil, invalid("function call has no name")
	default:
		return nil, invalid("unknown computer function %q", in.Name)
	}
	return p, nil
}

// keyNames maps the key names models write (upper case and browser-style
// for OpenAI, any case for Gemini) to the xdotool names the display takes.
var keyNames = map[string]string{
	"ENTER": "Return", "RETURN": "Return", "ESC": "Escape", "ESCAPE": "Escape",
	"ARROWLEFT": "Left", "ARROWRIGHT": "Right", "ARROWUP": "Up", "ARROWDOWN": "Down",
	"LEFT": "Left", "RIGHT": "Right", "UP": "Up", "DOWN": "Down",
	"BACKSPACE": "BackSpace", "DELETE": "Delete", "DEL": "Delete", "TAB": "Tab", "SPACE": "space",
	"HOME": "Home", "END": "End", "PAGEUP": "Page_Up", "PAGEDOWN": "Page_Down", "INSERT": "Insert",
	"CTRL": "ctrl", "CONTROL": "ctrl", "ALT": "alt", "OPTION": "alt", "SHIFT": "shift",
	"CMD": "super", "COMMAND": "super", "META": "super", "SUPER": "super", "WIN": "super",
	"CAPSLOCK": "Caps_Lock", "+": "plus", "-": "minus", " ": "space",
}

func openAIKey(k string) string {
	if v, ok := keyNames[strings.ToUpper(k)]; ok {
		return v
	}
	return k
}

// splitChord splits "Control+Shift+T" (or "control++") into key names.
func splitChord(s string) []string {
	s = strings.TrimSpace(s)
	switch {
	case s == "+":
		return []string{"+"}
	case strings.HasSuffix(s, "++"):
		return append(strings.Split(strings.TrimSuffix(s, "++"), "+"), "+")
	}
	parts := strings.Split(s, "+")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// chordOf joins keys pressed together into one chord. A single letter with
// modifiers is the lower-case key: CTRL+A means ctrl+a, not ctrl+shift+a.
func chordOf(keys []string) (string, error) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = openAIKey(k)
		if names[i] == "" || strings.ContainsAny(names[i], " \t\n+") {
			return "", invalid("key %q is not a key name", k)
		}
	}
	if len(names) > 1 {
		for i, n := range names {
			if utf8.RuneCountInString(n) == 1 {
				names[i] = strings.ToLower(n)
			}
		}
	}
	chord := strings.Join(names, "+")
	if _, err := keysym.ParseChord(chord); err != nil {
		return "", invalid("%v", err)
	}
	return chord, nil
}

// modifiers reads the keys Anthropic's click and scroll hold, given as text
// such as "shift" or "ctrl+shift".
func modifiers(text *string) ([]string, error) {
	if text == nil || strings.TrimSpace(*text) == "" {
		return nil, nil
	}
	if _, err := keysym.ParseChord(*text); err != nil {
		return nil, invalid("modifier keys: %v", err)
	}
	return splitChord(*text), nil
}

func duration(secs *float64) (time.Duration, error) {
	if secs == nil {
		return 0, invalid("duration (seconds) is required")
	}
	v := *secs
	if math.IsNaN(v) || v <= 0 || v > MaxDuration.Seconds() {
		return 0, invalid("duration %v is outside 0-%v seconds", v, MaxDuration.Seconds())
	}
	return time.Duration(v * float64(time.Second)), nil
}

// clicks converts a scroll distance in pixels to wheel clicks: whole
// clicks, at least one for any non-zero distance, at most MaxScrollClicks.
func clicks(px float64) int32 {
	if px == 0 || math.IsNaN(px) {
		return 0
	}
	n := math.Floor(math.Abs(px) / ScrollPixelsPerClick)
	n = math.Max(1, math.Min(n, MaxScrollClicks))
	if px < 0 {
		n = -n
	}
	return int32(n)
}

func checkText(s string) error {
	if n := utf8.RuneCountInString(s); n > MaxTextRunes {
		return invalid("text has %d characters; at most %d", n, MaxTextRunes)
	}
	if _, err := keysym.Text(s); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func click(at *displayv1.Point, b displayv1.MouseButton, n int32, hold []string) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: at, Button: b, Clicks: n, HoldKeys: hold}}}
}

func move(p *displayv1.Point) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{To: p}}}
}

func drag(path ...*displayv1.Point) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Drag{Drag: &displayv1.Drag{Path: path}}}
}

func key(chord string, hold time.Duration) *displayv1.Action {
	k := &displayv1.Key{Chord: chord}
	if hold > 0 {
		k.Hold = durationpb.New(hold)
	}
	return &displayv1.Action{Action: &displayv1.Action_Key{Key: k}}
}

func scroll(at *displayv1.Point, dx, dy int32, hold []string) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Scroll{Scroll: &displayv1.Scroll{At: at, DeltaX: dx, DeltaY: dy, HoldKeys: hold}}}
}

func typeText(s string) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: s}}}
}

func wait(d time.Duration) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Wait{Wait: &displayv1.Wait{Duration: durationpb.New(d)}}}
}
