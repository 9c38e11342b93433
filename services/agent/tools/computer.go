// Package tools carries out the tool calls a model makes: the computer tool
// on the session's display, bash and the text editor in its sandbox. It
// talks to display and sandbox only through their gRPC clients.
package tools

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/agent/provider"
)

// Plan is what a computer call asks of the display.
type Plan struct {
	Actions []*displayv1.Action
	// Screenshot after the actions (every computer call answers with one,
	// except cursor_position).
	Screenshot bool
	// CursorOnly answers with the pointer position instead of a screenshot.
	CursorOnly bool
	// Zoom, when set, is the region (in model coordinates) to show at full
	// model size.
	Zoom *displayv1.Rect
}

// Scale maps the model's coordinates to the display's.
type Scale struct {
	DisplayW, DisplayH int
	ModelW, ModelH     int
	// Normalized: coordinates are on a 0-999 grid (Gemini).
	Normalized bool
}

func (s Scale) point(x, y float64) *displayv1.Point {
	mw, mh := float64(s.ModelW), float64(s.ModelH)
	if s.Normalized {
		mw, mh = 1000, 1000
	}
	if mw <= 0 || mh <= 0 {
		return &displayv1.Point{X: int32(x), Y: int32(y)}
	}
	px := int32(x * float64(s.DisplayW) / mw)
	py := int32(y * float64(s.DisplayH) / mh)
	return &displayv1.Point{X: min(max(px, 0), int32(s.DisplayW-1)), Y: min(max(py, 0), int32(s.DisplayH-1))}
}

// ToModel maps a display point back to the model's coordinates.
func (s Scale) ToModel(p *displayv1.Point) (int, int) {
	if s.DisplayW <= 0 || s.DisplayH <= 0 {
		return int(p.GetX()), int(p.GetY())
	}
	mw, mh := s.ModelW, s.ModelH
	if s.Normalized {
		mw, mh = 1000, 1000
	}
	return int(p.GetX()) * mw / s.DisplayW, int(p.GetY()) * mh / s.DisplayH
}

// Decode turns a computer tool call into a plan for the display.
func Decode(call *provider.ToolCall, sc Scale) (*Plan, error) {
	switch call.Dialect {
	case provider.DialectOpenAI:
		return decodeOpenAI(call.Input, sc)
	case provider.DialectGemini:
		sc.Normalized = true
		return decodeGemini(call.Input, sc)
	default:
		return decodeAnthropic(call.Input, sc)
	}
}

func click(at *displayv1.Point, b displayv1.MouseButton, n int32, hold []string) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: at, Button: b, Clicks: n, HoldKeys: hold}}}
}

func move(p *displayv1.Point) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{To: p}}}
}

func key(chord string, hold time.Duration) *displayv1.Action {
	k := &displayv1.Key{Chord: chord}
	if hold > 0 {
		k.Hold = durationpb.New(hold)
	}
	return &displayv1.Action{Action: &displayv1.Action_Key{Key: k}}
}

func typeText(s string) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: s}}}
}

func wait(d time.Duration) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Wait{Wait: &displayv1.Wait{Duration: durationpb.New(d)}}}
}

func scroll(at *displayv1.Point, dx, dy int32, hold []string) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Scroll{Scroll: &displayv1.Scroll{At: at, DeltaX: dx, DeltaY: dy, HoldKeys: hold}}}
}

func button(b displayv1.MouseButton, down bool) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Button{Button: &displayv1.ButtonPress{Button: b, Down: down}}}
}

func drag(path ...*displayv1.Point) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Drag{Drag: &displayv1.Drag{Path: path}}}
}

// xdoKey turns the key names models use into the display's xdotool names.
func xdoKey(s string) string {
	parts := strings.Split(s, "+")
	for i, p := range parts {
		switch strings.ToLower(strings.TrimSpace(p)) {
		case "enter", "return":
			parts[i] = "Return"
		case "esc", "escape":
			parts[i] = "Escape"
		case "control", "ctrl":
			parts[i] = "ctrl"
		case "cmd", "command", "meta", "win", "super":
			parts[i] = "super"
		case "option", "alt":
			parts[i] = "alt"
		case "shift":
			parts[i] = "shift"
		case "backspace":
			parts[i] = "BackSpace"
		case "tab":
			parts[i] = "Tab"
		case "space":
			parts[i] = "space"
		case "delete", "del":
			parts[i] = "Delete"
		case "arrowup", "up":
			parts[i] = "Up"
		case "arrowdown", "down":
			parts[i] = "Down"
		case "arrowleft", "left":
			parts[i] = "Left"
		case "arrowright", "right":
			parts[i] = "Right"
		case "pageup":
			parts[i] = "Prior"
		case "pagedown":
			parts[i] = "Next"
		case "home":
			parts[i] = "Home"
		case "end":
			parts[i] = "End"
		default:
			parts[i] = strings.TrimSpace(p)
		}
	}
	return strings.Join(parts, "+")
}

func holdKeys(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(xdoKey(s), "+")
}

type anthropicInput struct {
	Action          string    `json:"action"`
	Coordinate      []float64 `json:"coordinate"`
	StartCoordinate []float64 `json:"start_coordinate"`
	Text            string    `json:"text"`
	Duration        float64   `json:"duration"`
	ScrollDirection string    `json:"scroll_direction"`
	ScrollAmount    int32     `json:"scroll_amount"`
	Region          []float64 `json:"region"`
}

func decodeAnthropic(raw json.RawMessage, sc Scale) (*Plan, error) {
	var in anthropicInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("computer input is not valid JSON: %w", err)
	}
	var at *displayv1.Point
	if len(in.Coordinate) == 2 {
		at = sc.point(in.Coordinate[0], in.Coordinate[1])
	}
	need := func() error {
		if at == nil {
			return fmt.Errorf("%s needs coordinate [x, y]", in.Action)
		}
		return nil
	}
	p := &Plan{Screenshot: true}
	switch in.Action {
	case "screenshot":
	case "cursor_position":
		p.Screenshot, p.CursorOnly = false, true
	case "mouse_move":
		if err := need(); err != nil {
			return nil, err
		}
		p.Actions = append(p.Actions, move(at))
	case "left_click", "right_click", "middle_click", "double_click", "triple_click":
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
		p.Actions = append(p.Actions, click(at, b, n, holdKeys(in.Text)))
	case "left_click_drag":
		if len(in.StartCoordinate) != 2 || at == nil {
			return nil, fmt.Errorf("left_click_drag needs start_coordinate and coordinate")
		}
		p.Actions = append(p.Actions, drag(sc.point(in.StartCoordinate[0], in.StartCoordinate[1]), at))
	case "left_mouse_down", "left_mouse_up":
		if at != nil {
			p.Actions = append(p.Actions, move(at))
		}
		p.Actions = append(p.Actions, button(displayv1.MouseButton_MOUSE_BUTTON_LEFT, in.Action == "left_mouse_down"))
	case "key":
		if in.Text == "" {
			return nil, fmt.Errorf("key needs text")
		}
		for _, k := range strings.Fields(in.Text) {
			p.Actions = append(p.Actions, key(xdoKey(k), 0))
		}
	case "hold_key":
		if in.Text == "" {
			return nil, fmt.Errorf("hold_key needs text")
		}
		p.Actions = append(p.Actions, key(xdoKey(in.Text), time.Duration(min(in.Duration, 100)*float64(time.Second))))
	case "type":
		if in.Text == "" {
			return nil, fmt.Errorf("type needs text")
		}
		p.Actions = append(p.Actions, typeText(in.Text))
	case "scroll":
		n := max(in.ScrollAmount, 1)
		var dx, dy int32
		switch in.ScrollDirection {
		case "up":
			dy = -n
		case "down":
			dy = n
		case "left":
			dx = -n
		case "right":
			dx = n
		default:
			return nil, fmt.Errorf("scroll_direction must be up, down, left or right")
		}
		p.Actions = append(p.Actions, scroll(at, dx, dy, holdKeys(in.Text)))
	case "wait":
		d := in.Duration
		if d <= 0 {
			d = 1
		}
		p.Actions = append(p.Actions, wait(time.Duration(min(d, 100)*float64(time.Second))))
	case "zoom":
		if len(in.Region) != 4 {
			return nil, fmt.Errorf("zoom needs region [x1, y1, x2, y2]")
		}
		a, b := sc.point(in.Region[0], in.Region[1]), sc.point(in.Region[2], in.Region[3])
		if b.X <= a.X || b.Y <= a.Y {
			return nil, fmt.Errorf("zoom region must have x2 > x1 and y2 > y1")
		}
		p.Zoom = &displayv1.Rect{X: a.X, Y: a.Y, Width: b.X - a.X, Height: b.Y - a.Y}
	default:
		return nil, fmt.Errorf("unknown computer action %q", in.Action)
	}
	return p, nil
}

type openaiAction struct {
	Type    string                   `json:"type"`
	Button  string                   `json:"button"`
	X       float64                  `json:"x"`
	Y       float64                  `json:"y"`
	Keys    []string                 `json:"keys"`
	Path    []struct{ X, Y float64 } `json:"path"`
	ScrollX int32                    `json:"scroll_x"`
	ScrollY int32                    `json:"scroll_y"`
	Text    string                   `json:"text"`
}

func decodeOpenAI(raw json.RawMessage, sc Scale) (*Plan, error) {
	var list []openaiAction
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("computer actions are not valid JSON: %w", err)
	}
	p := &Plan{Screenshot: true}
	for _, a := range list {
		at := sc.point(a.X, a.Y)
		switch a.Type {
		case "screenshot":
		case "click":
			b := displayv1.MouseButton_MOUSE_BUTTON_LEFT
			switch a.Button {
			case "right":
				b = displayv1.MouseButton_MOUSE_BUTTON_RIGHT
			case "wheel", "middle":
				b = displayv1.MouseButton_MOUSE_BUTTON_MIDDLE
			case "back", "forward":
				return nil, fmt.Errorf("mouse button %q is not supported", a.Button)
			}
			p.Actions = append(p.Actions, click(at, b, 1, nil))
		case "double_click":
			p.Actions = append(p.Actions, click(at, displayv1.MouseButton_MOUSE_BUTTON_LEFT, 2, nil))
		case "move":
			p.Actions = append(p.Actions, move(at))
		case "drag":
			var path []*displayv1.Point
			for _, q := range a.Path {
				path = append(path, sc.point(q.X, q.Y))
			}
			if len(path) < 2 {
				return nil, fmt.Errorf("drag needs a path of two points or more")
			}
			p.Actions = append(p.Actions, drag(path...))
		case "keypress":
			if len(a.Keys) == 0 {
				return nil, fmt.Errorf("keypress needs keys")
			}
			p.Actions = append(p.Actions, key(xdoKey(strings.Join(a.Keys, "+")), 0))
		case "type":
			p.Actions = append(p.Actions, typeText(a.Text))
		case "scroll":
			// OpenAI scrolls in pixels; a wheel click moves about 100.
			p.Actions = append(p.Actions, scroll(at, clicks(a.ScrollX), clicks(a.ScrollY), nil))
		case "wait":
			p.Actions = append(p.Actions, wait(time.Second))
		default:
			return nil, fmt.Errorf("unknown computer action %q", a.Type)
		}
	}
	return p, nil
}

func clicks(px int32) int32 {
	switch {
	case px == 0:
		return 0
	case px > 0:
		return max(px/100, 1)
	default:
		return min(px/100, -1)
	}
}

func decodeGemini(raw json.RawMessage, sc Scale) (*Plan, error) {
	var in struct {
		Name string         `json:"name"`
		Args map[string]any `json:"args"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("computer call is not valid JSON: %w", err)
	}
	num := func(k string) float64 { f, _ := in.Args[k].(float64); return f }
	str := func(k string) string { s, _ := in.Args[k].(string); return s }
	at := sc.point(num("x"), num("y"))
	p := &Plan{Screenshot: true}
	switch in.Name {
	case "open_web_browser", "wait_5_seconds":
		if in.Name == "wait_5_seconds" {
			p.Actions = append(p.Actions, wait(5*time.Second))
		}
	case "click_at":
		p.Actions = append(p.Actions, click(at, displayv1.MouseButton_MOUSE_BUTTON_LEFT, 1, nil))
	case "hover_at":
		p.Actions = append(p.Actions, move(at))
	case "type_text_at":
		p.Actions = append(p.Actions, click(at, displayv1.MouseButton_MOUSE_BUTTON_LEFT, 1, nil))
		if b, ok := in.Args["clear_before_typing"].(bool); !ok || b {
			p.Actions = append(p.Actions, key("ctrl+a", 0), key("BackSpace", 0))
		}
		p.Actions = append(p.Actions, typeText(str("text")))
		if b, ok := in.Args["press_enter"].(bool); !ok || b {
			p.Actions = append(p.Actions, key("Return", 0))
		}
	case "key_combination":
		p.Actions = append(p.Actions, key(xdoKey(str("keys")), 0))
	case "scroll_document", "scroll_at":
		n := int32(5)
		if m := num("magnitude"); m > 0 {
			n = max(int32(m/100), 1)
		}
		var dx, dy int32
		switch str("direction") {
		case "up":
			dy = -n
		case "down":
			dy = n
		case "left":
			dx = -n
		case "right":
			dx = n
		}
		if in.Name == "scroll_document" {
			at = &displayv1.Point{X: int32(sc.DisplayW / 2), Y: int32(sc.DisplayH / 2)}
		}
		p.Actions = append(p.Actions, scroll(at, dx, dy, nil))
	case "drag_and_drop":
		p.Actions = append(p.Actions, drag(at, sc.point(num("destination_x"), num("destination_y"))))
	case "navigate", "search", "go_back", "go_forward":
		// Browser functions on a desktop: drive the focused browser by keys.
		switch in.Name {
		case "go_back":
			p.Actions = append(p.Actions, key("alt+Left", 0))
		case "go_forward":
			p.Actions = append(p.Actions, key("alt+Right", 0))
		default:
			u := str("url")
			if in.Name == "search" {
				u = "https://www.google.com"
			}
			p.Actions = append(p.Actions, key("ctrl+l", 0), typeText(u), key("Return", 0))
		}
	default:
		return nil, fmt.Errorf("unknown computer function %q", in.Name)
	}
	return p, nil
}
