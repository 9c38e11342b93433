package tools

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/agent/provider"
)

// actions renders a plan's actions compactly for comparison.
func actions(p *Plan) string {
	var parts []string
	for _, a := range p.Actions {
		// prototext varies its spacing on purpose: compare without it.
		parts = append(parts, strings.Join(strings.Fields(prototext.MarshalOptions{}.Format(a)), ""))
	}
	return strings.Join(parts, "|")
}

func squeeze(s string) string { return strings.Join(strings.Fields(s), "") }

func TestDecode(t *testing.T) {
	// A 2560x1600 screen seen by the model at 1280x800: coordinates double.
	half := Scale{DisplayW: 2560, DisplayH: 1600, ModelW: 1280, ModelH: 800}
	same := Scale{DisplayW: 1280, DisplayH: 800, ModelW: 1280, ModelH: 800}
	tests := []struct {
		name    string
		dialect provider.Dialect
		sc      Scale
		input   string
		want    string
		err     string
		shot    bool
		cursor  bool
		zoom    *displayv1.Rect
	}{
		{name: "screenshot", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"screenshot"}`, want: "", shot: true},
		{name: "click scaled", dialect: provider.DialectAnthropic, sc: half, input: `{"action":"left_click","coordinate":[100,200]}`,
			want: "click: { at: { x: 200 y: 400 } button: MOUSE_BUTTON_LEFT clicks: 1 }", shot: true},
		{name: "click clamped", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"left_click","coordinate":[5000,-3]}`,
			want: "click: { at: { x: 1279 } button: MOUSE_BUTTON_LEFT clicks: 1 }", shot: true},
		{name: "shift click", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"left_click","coordinate":[1,2],"text":"shift"}`,
			want: `click: { at: { x: 1 y: 2 } button: MOUSE_BUTTON_LEFT clicks: 1 hold_keys: "shift" }`, shot: true},
		{name: "triple click", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"triple_click","coordinate":[1,2]}`,
			want: "click: { at: { x: 1 y: 2 } button: MOUSE_BUTTON_LEFT clicks: 3 }", shot: true},
		{name: "keys", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"key","text":"ctrl+s Return"}`,
			want: `key: { chord: "ctrl+s" } | key: { chord: "Return" }`, shot: true},
		{name: "type", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"type","text":"héllo"}`,
			want: `type: { text: "héllo" }`, shot: true},
		{name: "scroll", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"scroll","coordinate":[10,10],"scroll_direction":"up","scroll_amount":3}`,
			want: "scroll: { at: { x: 10 y: 10 } delta_y: -3 }", shot: true},
		{name: "drag", dialect: provider.DialectAnthropic, sc: half, input: `{"action":"left_click_drag","start_coordinate":[1,1],"coordinate":[5,5]}`,
			want: "drag: { path: { x: 2 y: 2 } path: { x: 10 y: 10 } }", shot: true},
		{name: "cursor", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"cursor_position"}`, cursor: true},
		{name: "zoom", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"zoom","region":[10,20,110,70]}`, shot: true,
			zoom: &displayv1.Rect{X: 10, Y: 20, Width: 100, Height: 50}},
		{name: "click where the pointer is", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"left_click"}`,
			want: "click: { button: MOUSE_BUTTON_LEFT clicks: 1 }", shot: true},
		{name: "move without coordinate", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"mouse_move"}`, err: "needs coordinate"},
		{name: "bad scroll", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"scroll","coordinate":[1,1],"scroll_direction":"sideways"}`, err: "scroll_direction"},
		{name: "unknown action", dialect: provider.DialectAnthropic, sc: same, input: `{"action":"dance"}`, err: "unknown computer action"},
		{name: "not json", dialect: provider.DialectAnthropic, sc: same, input: `{`, err: "not valid JSON"},

		{name: "openai batch", dialect: provider.DialectOpenAI, sc: half, input: `[{"type":"click","button":"right","x":10,"y":20},{"type":"keypress","keys":["CTRL","A"]},{"type":"scroll","x":1,"y":1,"scroll_y":-250}]`,
			want: `click: { at: { x: 20 y: 40 } button: MOUSE_BUTTON_RIGHT clicks: 1 } | key: { chord: "ctrl+A" } | scroll: { at: { x: 2 y: 2 } delta_y: -2 }`, shot: true},
		{name: "openai drag", dialect: provider.DialectOpenAI, sc: same, input: `[{"type":"drag","path":[{"x":1,"y":1},{"x":9,"y":9}]}]`,
			want: "drag: { path: { x: 1 y: 1 } path: { x: 9 y: 9 } }", shot: true},
		{name: "openai back button", dialect: provider.DialectOpenAI, sc: same, input: `[{"type":"click","button":"back","x":1,"y":1}]`, err: "not supported"},

		{name: "gemini click on the grid", dialect: provider.DialectGemini, sc: same, input: `{"name":"click_at","args":{"x":500,"y":250}}`,
			want: "click: { at: { x: 640 y: 200 } button: MOUSE_BUTTON_LEFT clicks: 1 }", shot: true},
		{name: "gemini type and enter", dialect: provider.DialectGemini, sc: same, input: `{"name":"type_text_at","args":{"x":0,"y":0,"text":"hi"}}`,
			want: `click: { at: {} button: MOUSE_BUTTON_LEFT clicks: 1 } | key: { chord: "ctrl+a" } | key: { chord: "BackSpace" } | type: { text: "hi" } | key: { chord: "Return" }`, shot: true},
		{name: "gemini navigate", dialect: provider.DialectGemini, sc: same, input: `{"name":"navigate","args":{"url":"https://example.com"}}`,
			want: `key: { chord: "ctrl+l" } | type: { text: "https://example.com" } | key: { chord: "Return" }`, shot: true},
		{name: "gemini unknown", dialect: provider.DialectGemini, sc: same, input: `{"name":"fly","args":{}}`, err: "unknown computer function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decode(&provider.ToolCall{Name: provider.ToolComputer, Input: json.RawMessage(tt.input), Dialect: tt.dialect}, tt.sc)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := actions(p); got != squeeze(tt.want) {
				t.Fatalf("actions\n got %s\nwant %s", got, tt.want)
			}
			if p.Screenshot != tt.shot || p.CursorOnly != tt.cursor {
				t.Fatalf("screenshot %v cursor %v", p.Screenshot, p.CursorOnly)
			}
			if tt.zoom != nil && (p.Zoom == nil || p.Zoom.String() != tt.zoom.String()) {
				t.Fatalf("zoom = %v, want %v", p.Zoom, tt.zoom)
			}
		})
	}
}

func TestScaleToModel(t *testing.T) {
	for _, tt := range []struct {
		sc   Scale
		x, y int32
		wx   int
		wy   int
	}{
		{Scale{DisplayW: 2560, DisplayH: 1600, ModelW: 1280, ModelH: 800}, 200, 400, 100, 200},
		{Scale{DisplayW: 1280, DisplayH: 800, ModelW: 1280, ModelH: 800, Normalized: true}, 640, 200, 500, 250},
		{Scale{}, 7, 9, 7, 9},
	} {
		if x, y := tt.sc.ToModel(&displayv1.Point{X: tt.x, Y: tt.y}); x != tt.wx || y != tt.wy {
			t.Errorf("%+v: (%d,%d) -> (%d,%d), want (%d,%d)", tt.sc, tt.x, tt.y, x, y, tt.wx, tt.wy)
		}
	}
}

func TestEditorPaths(t *testing.T) {
	e := &Executor{}
	for in, want := range map[string]string{
		"/home/user/a.txt":         "a.txt",
		"/home/user/dir/../b.txt":  "b.txt",
		"/home/user":               "",
		"/home/user/":              "",
		"notes/c.txt":              "notes/c.txt",
		"/etc/passwd":              "!",
		"/home/user/../etc/passwd": "!",
		"/home/username/x":         "!",
		"/":                        "!",
	} {
		got, ok := e.relPath(in)
		if !ok {
			got = "!"
		}
		if got != want {
			t.Errorf("relPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// On a session that runs an image the sandbox's files are the whole file
// system: absolute paths are taken as they are, relative ones from the
// home, and the sandbox refuses any that climb out.
func TestEditorPathsOnAnImage(t *testing.T) {
	e := &Executor{WholeRoot: true}
	for in, want := range map[string]string{
		"/home/user/a.txt":   "/home/user/a.txt",
		"/tmp/x/../b.txt":    "/tmp/b.txt",
		"/etc/app.conf":      "/etc/app.conf",
		"notes/c.txt":        "notes/c.txt",
		"/":                  "/",
		"/home/user/../../x": "/x",
	} {
		got, ok := e.relPath(in)
		if !ok || got != want {
			t.Errorf("relPath(%q) = %q %v, want %q", in, got, ok, want)
		}
	}
}
