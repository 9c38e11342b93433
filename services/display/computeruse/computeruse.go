// Package computeruse decodes the computer-use tool calls of model providers
// (Anthropic's computer tool, versions computer_20250124 and
// computer_20251124, and OpenAI's computer-use actions) into display
// actions, so code written for either provider drives the same engine.
//
// A decoded call is run with one PerformActions request: its actions, with
// screenshot set to Extra.Screenshot, and with scale_to set to the size the
// model was told the screen has. Every call decodes to at least one action
// (a screenshot is a CursorPosition with Extra.Screenshot).
package computeruse

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/xinput"
)

// ErrInvalid marks a tool call the model must correct; report it to the
// model as the tool's error (InvalidArgument at an API edge).
var ErrInvalid = errors.New("invalid computer-use action")

// Extra says what the tool result holds besides the actions' effect.
type Extra struct {
	// Screenshot: the result carries a screenshot of the settled screen
	// (PerformActionsRequest.screenshot).
	Screenshot bool
	// Cursor: the result is the pointer position
	// (PerformActionsResponse.cursor), as for cursor_position.
	Cursor bool
	// Zoom: the result is PerformActionsResponse.images[0].
	Zoom bool
}

// Limits, matching what the display accepts.
const (
	// MaxDuration bounds hold_key and wait.
	MaxDuration = 100 * time.Second
	// MaxScrollClicks bounds a scroll, in wheel clicks.
	MaxScrollClicks = 100
	// MaxTextRunes bounds typed text.
	MaxTextRunes = 10000
	// OpenAIScrollPixelsPerClick converts OpenAI's scroll distances, in
	// pixels, into wheel clicks: a wheel click scrolls about this far in
	// browsers and toolkits.
	OpenAIScrollPixelsPerClick = 100
	// OpenAIWait is how long OpenAI's wait action pauses; it carries no
	// duration of its own.
	OpenAIWait = time.Second
)

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

// DecodeAnthropic decodes the input of Anthropic's computer tool
// (computer_20250124 or computer_20251124).
func DecodeAnthropic(input json.RawMessage) ([]*displayv1.Action, Extra, error) {
	var in anthropicInput
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, Extra{}, invalid("input is not a JSON object of the computer tool: %v", err)
	}
	shot := Extra{Screenshot: true}
	switch in.Action {
	case "screenshot":
		return []*displayv1.Action{cursorPosition()}, shot, nil
	case "cursor_position":
		return []*displayv1.Action{cursorPosition()}, Extra{Cursor: true}, nil
	case "mouse_move":
		p, err := point("coordinate", in.Coordinate, true)
		if err != nil {
			return nil, Extra{}, err
		}
		if in.Text != nil {
			return nil, Extra{}, invalid("mouse_move takes no text")
		}
		return []*displayv1.Action{move(p)}, shot, nil
	case "left_click", "right_click", "middle_click", "double_click", "triple_click":
		p, err := point("coordinate", in.Coordinate, false)
		if err != nil {
			return nil, Extra{}, err
		}
		hold, err := modifiers(in.Text)
		if err != nil {
			return nil, Extra{}, err
		}
		c := &displayv1.Click{At: p, Button: displayv1.MouseButton_MOUSE_BUTTON_LEFT, Clicks: 1, HoldKeys: hold}
		switch in.Action {
		case "right_click":
			c.Button = displayv1.MouseButton_MOUSE_BUTTON_RIGHT
		case "middle_click":
			c.Button = displayv1.MouseButton_MOUSE_BUTTON_MIDDLE
		case "double_click":
			c.Clicks = 2
		case "triple_click":
			c.Clicks = 3
		}
		return []*displayv1.Action{{Action: &displayv1.Action_Click{Click: c}}}, shot, nil
	case "left_click_drag":
		from, err := point("start_coordinate", in.StartCoordinate, true)
		if err != nil {
			return nil, Extra{}, err
		}
		to, err := point("coordinate", in.Coordinate, true)
		if err != nil {
			return nil, Extra{}, err
		}
		return []*displayv1.Action{drag(from, to)}, shot, nil
	case "left_mouse_down", "left_mouse_up":
		p, err := point("coordinate", in.Coordinate, false)
		if err != nil {
			return nil, Extra{}, err
		}
		var out []*displayv1.Action
		if p != nil {
			out = append(out, move(p))
		}
		out = append(out, &displayv1.Action{Action: &displayv1.Action_Button{Button: &displayv1.ButtonPress{
			Button: displayv1.MouseButton_MOUSE_BUTTON_LEFT, Down: in.Action == "left_mouse_down"}}})
		return out, shot, nil
	case "scroll":
		p, err := point("coordinate", in.Coordinate, false)
		if err != nil {
			return nil, Extra{}, err
		}
		if in.ScrollAmount == nil {
			return nil, Extra{}, invalid("scroll needs scroll_amount")
		}
		n, err := whole("scroll_amount", *in.ScrollAmount)
		if err != nil {
			return nil, Extra{}, err
		}
		if n < 1 || n > MaxScrollClicks {
			return nil, Extra{}, invalid("scroll_amount %d is outside 1-%d", n, MaxScrollClicks)
		}
		hold, err := modifiers(in.Text)
		if err != nil {
			return nil, Extra{}, err
		}
		sc := &displayv1.Scroll{At: p, HoldKeys: hold}
		switch in.ScrollDirection {
		case "up":
			sc.DeltaY = -int32(n)
		case "down":
			sc.DeltaY = int32(n)
		case "left":
			sc.DeltaX = -int32(n)
		case "right":
			sc.DeltaX = int32(n)
		default:
			return nil, Extra{}, invalid("scroll_direction %q is not one of up, down, left, right", in.ScrollDirection)
		}
		return []*displayv1.Action{{Action: &displayv1.Action_Scroll{Scroll: sc}}}, shot, nil
	case "key", "hold_key":
		text := in.Text
		if text == nil {
			text = in.Key
		}
		if text == nil || strings.TrimSpace(*text) == "" {
			return nil, Extra{}, invalid("%s needs text naming the keys, such as ctrl+s or Return", in.Action)
		}
		if _, err := xinput.ParseChords(*text); err != nil {
			return nil, Extra{}, invalid("%v", err)
		}
		k := &displayv1.Key{Chord: *text}
		if in.Action == "hold_key" {
			d, err := duration(in.Duration, true)
			if err != nil {
				return nil, Extra{}, err
			}
			k.Hold = durationpb.New(d)
		}
		return []*displayv1.Action{{Action: &displayv1.Action_Key{Key: k}}}, shot, nil
	case "type":
		if in.Text == nil || *in.Text == "" {
			return nil, Extra{}, invalid("type needs text")
		}
		if err := checkText(*in.Text); err != nil {
			return nil, Extra{}, err
		}
		return []*displayv1.Action{typeText(*in.Text)}, shot, nil
	case "wait":
		d, err := duration(in.Duration, true)
		if err != nil {
			return nil, Extra{}, err
		}
		return []*displayv1.Action{wait(d)}, shot, nil
	case "zoom":
		if len(in.Region) != 4 {
			return nil, Extra{}, invalid("zoom needs region [x0, y0, x1, y1]")
		}
		var r [4]int32
		for i, v := range in.Region {
			n, err := whole("region", v)
			if err != nil {
				return nil, Extra{}, err
			}
			r[i] = n
		}
		if r[2] <= r[0] || r[3] <= r[1] {
			return nil, Extra{}, invalid("zoom region [%d, %d, %d, %d] is empty: x1 and y1 must exceed x0 and y0", r[0], r[1], r[2], r[3])
		}
		return []*displayv1.Action{{Action: &displayv1.Action_Zoom{Zoom: &displayv1.Zoom{
			Region: &displayv1.Rect{X: r[0], Y: r[1], Width: r[2] - r[0], Height: r[3] - r[1]}}}}}, Extra{Zoom: true}, nil
	case "":
		return nil, Extra{}, invalid("input has no action")
	}
	return nil, Extra{}, invalid("unknown action %q", in.Action)
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

// DecodeOpenAI decodes the action of an OpenAI computer_call. Every
// OpenAI action is answered with a screenshot.
func DecodeOpenAI(action json.RawMessage) ([]*displayv1.Action, Extra, error) {
	var in openAIAction
	if err := json.Unmarshal(action, &in); err != nil {
		return nil, Extra{}, invalid("action is not a JSON object of a computer_call: %v", err)
	}
	shot := Extra{Screenshot: true}
	at := func() (*displayv1.Point, error) {
		if in.X == nil || in.Y == nil {
			return nil, invalid("%s needs x and y", in.Type)
		}
		return point("x, y", []float64{*in.X, *in.Y}, true)
	}
	held := func() ([]string, error) {
		var out []string
		for _, k := range in.Keys {
			name := openAIKey(k)
			if _, err := xinput.KeyName(name); err != nil {
				return nil, invalid("keys: %v", err)
			}
			out = append(out, name)
		}
		return out, nil
	}
	switch in.Type {
	case "screenshot":
		return []*displayv1.Action{cursorPosition()}, shot, nil
	case "click", "double_click":
		p, err := at()
		if err != nil {
			return nil, Extra{}, err
		}
		hold, err := held()
		if err != nil {
			return nil, Extra{}, err
		}
		c := &displayv1.Click{At: p, Clicks: 1, HoldKeys: hold, Button: displayv1.MouseButton_MOUSE_BUTTON_LEFT}
		if in.Type == "double_click" {
			c.Clicks = 2
		} else {
			switch in.Button {
			case "", "left":
			case "right":
				c.Button = displayv1.MouseButton_MOUSE_BUTTON_RIGHT
			case "wheel", "middle":
				c.Button = displayv1.MouseButton_MOUSE_BUTTON_MIDDLE
			case "back":
				c.Button = displayv1.MouseButton_MOUSE_BUTTON_BACK
			case "forward":
				c.Button = displayv1.MouseButton_MOUSE_BUTTON_FORWARD
			default:
				return nil, Extra{}, invalid("button %q is not one of left, right, wheel, back, forward", in.Button)
			}
		}
		return []*displayv1.Action{{Action: &displayv1.Action_Click{Click: c}}}, shot, nil
	case "move":
		p, err := at()
		if err != nil {
			return nil, Extra{}, err
		}
		return []*displayv1.Action{move(p)}, shot, nil
	case "drag":
		if len(in.Path) < 2 {
			return nil, Extra{}, invalid("drag needs a path of at least two points")
		}
		if len(in.Path) > 10000 {
			return nil, Extra{}, invalid("drag path has %d points; at most 10000", len(in.Path))
		}
		d := &displayv1.Drag{}
		for i, q := range in.Path {
			if q.X == nil || q.Y == nil {
				return nil, Extra{}, invalid("drag path point %d needs x and y", i)
			}
			p, err := point("path point", []float64{*q.X, *q.Y}, true)
			if err != nil {
				return nil, Extra{}, err
			}
			d.Path = append(d.Path, p)
		}
		return []*displayv1.Action{{Action: &displayv1.Action_Drag{Drag: d}}}, shot, nil
	case "keypress":
		if len(in.Keys) == 0 {
			return nil, Extra{}, invalid("keypress needs keys")
		}
		chord, err := openAIChord(in.Keys)
		if err != nil {
			return nil, Extra{}, err
		}
		return []*displayv1.Action{{Action: &displayv1.Action_Key{Key: &displayv1.Key{Chord: chord}}}}, shot, nil
	case "scroll":
		p, err := at()
		if err != nil {
			return nil, Extra{}, err
		}
		var sx, sy float64
		if in.ScrollX != nil {
			sx = *in.ScrollX
		}
		if in.ScrollY != nil {
			sy = *in.ScrollY
		}
		cx, err := clicks("scroll_x", sx)
		if err != nil {
			return nil, Extra{}, err
		}
		cy, err := clicks("scroll_y", sy)
		if err != nil {
			return nil, Extra{}, err
		}
		if cx == 0 && cy == 0 {
			return nil, Extra{}, invalid("scroll needs a non-zero scroll_x or scroll_y")
		}
		hold, err := held()
		if err != nil {
			return nil, Extra{}, err
		}
		return []*displayv1.Action{{Action: &displayv1.Action_Scroll{Scroll: &displayv1.Scroll{
			At: p, DeltaX: cx, DeltaY: cy, HoldKeys: hold}}}}, shot, nil
	case "type":
		if in.Text == nil || *in.Text == "" {
			return nil, Extra{}, invalid("type needs text")
		}
		if err := checkText(*in.Text); err != nil {
			return nil, Extra{}, err
		}
		return []*displayv1.Action{typeText(*in.Text)}, shot, nil
	case "wait":
		d := OpenAIWait
		if in.Ms != nil {
			ms, err := whole("ms", *in.Ms)
			if err != nil {
				return nil, Extra{}, err
			}
			d = time.Duration(ms) * time.Millisecond
			if d <= 0 || d > MaxDuration {
				return nil, Extra{}, invalid("wait ms %d is outside 1-%d", ms, MaxDuration.Milliseconds())
			}
		}
		return []*displayv1.Action{wait(d)}, shot, nil
	case "":
		return nil, Extra{}, invalid("action has no type")
	}
	return nil, Extra{}, invalid("unknown action type %q", in.Type)
}

// openAIKeys maps OpenAI's key names (upper case, browser-style) to the
// xdotool names the display takes.
var openAIKeys = map[string]string{
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
	if v, ok := openAIKeys[strings.ToUpper(k)]; ok {
		return v
	}
	return k
}

// openAIChord joins keys pressed together into one chord. A single letter
// with modifiers is the lower-case key: CTRL+A means ctrl+a, not ctrl+shift+a.
func openAIChord(keys []string) (string, error) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = openAIKey(k)
		if names[i] == "" || strings.ContainsAny(names[i], " \t\n") {
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
	for i, n := range names {
		// A lone "+" inside a chord is written as its name.
		if n == "+" {
			names[i] = "plus"
		}
	}
	chord := strings.Join(names, "+")
	if _, err := xinput.ParseChord(chord); err != nil {
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
	syms, err := xinput.ParseChord(*text)
	if err != nil {
		return nil, invalid("modifier keys: %v", err)
	}
	if len(syms) == 0 {
		return nil, nil
	}
	var out []string
	for _, p := range strings.Split(strings.TrimSpace(*text), "+") {
		out = append(out, strings.TrimSpace(p))
	}
	return out, nil
}

func point(what string, v []float64, required bool) (*displayv1.Point, error) {
	if v == nil {
		if required {
			return nil, invalid("%s is required", what)
		}
		return nil, nil
	}
	if len(v) != 2 {
		return nil, invalid("%s must be [x, y]", what)
	}
	x, err := whole(what, v[0])
	if err != nil {
		return nil, err
	}
	y, err := whole(what, v[1])
	if err != nil {
		return nil, err
	}
	if x < 0 || y < 0 {
		return nil, invalid("%s (%d, %d) is negative", what, x, y)
	}
	return &displayv1.Point{X: x, Y: y}, nil
}

// whole accepts an integral number that fits a coordinate.
func whole(what string, v float64) (int32, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v != math.Trunc(v) || v < math.MinInt32 || v > math.MaxInt32 {
		return 0, invalid("%s: %v is not a whole number", what, v)
	}
	return int32(v), nil
}

func duration(secs *float64, required bool) (time.Duration, error) {
	if secs == nil {
		if required {
			return 0, invalid("duration (seconds) is required")
		}
		return 0, nil
	}
	v := *secs
	if math.IsNaN(v) || v <= 0 || v > MaxDuration.Seconds() {
		return 0, invalid("duration %v is outside 0-%v seconds", v, MaxDuration.Seconds())
	}
	return time.Duration(v * float64(time.Second)), nil
}

// clicks converts an OpenAI scroll distance in pixels to wheel clicks, at
// least one for any non-zero distance.
func clicks(what string, px float64) (int32, error) {
	if math.IsNaN(px) || math.IsInf(px, 0) {
		return 0, invalid("%s is not a number", what)
	}
	if px == 0 {
		return 0, nil
	}
	n := math.Round(math.Abs(px) / OpenAIScrollPixelsPerClick)
	n = math.Max(1, math.Min(n, MaxScrollClicks))
	if px < 0 {
		n = -n
	}
	return int32(n), nil
}

func checkText(s string) error {
	if n := utf8.RuneCountInString(s); n > MaxTextRunes {
		return invalid("text has %d characters; at most %d", n, MaxTextRunes)
	}
	if _, err := xinput.TextKeysyms(s); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func cursorPosition() *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_CursorPosition{CursorPosition: &displayv1.CursorPosition{}}}
}

func move(p *displayv1.Point) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{To: p}}}
}

func drag(from, to *displayv1.Point) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Drag{Drag: &displayv1.Drag{Path: []*displayv1.Point{from, to}}}}
}

func typeText(s string) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: s}}}
}

func wait(d time.Duration) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Wait{Wait: &displayv1.Wait{Duration: durationpb.New(d)}}}
}
