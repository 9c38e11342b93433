package computeruse

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// action parses an Action from its proto JSON, to keep the tables short.
func action(t *testing.T, s string) *displayv1.Action {
	t.Helper()
	a := &displayv1.Action{}
	if err := protojson.Unmarshal([]byte(s), a); err != nil {
		t.Fatalf("bad test action %s: %v", s, err)
	}
	return a
}

// answer is what the model gets back from a plan.
type answer int

const (
	shot answer = iota
	cursor
	zoomed
)

func answerOf(p *Plan) answer {
	switch {
	case p.CursorOnly:
		return cursor
	case p.Zoom != nil:
		return zoomed
	}
	return shot
}

type decodeCase struct {
	in   string
	want []string
	ans  answer
}

// check decodes unscaled and compares the actions of the plan's request
// (a zoom is its last action).
func check(t *testing.T, d Dialect, cases []decodeCase) {
	t.Helper()
	for _, tc := range cases {
		p, err := Decode(d, json.RawMessage(tc.in), Scale{})
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if a := answerOf(p); a != tc.ans {
			t.Errorf("%s: answer %v, want %v", tc.in, a, tc.ans)
		}
		req := p.Request(nil)
		if req.GetScreenshot() != (tc.ans == shot) {
			t.Errorf("%s: request screenshot %v", tc.in, req.GetScreenshot())
		}
		got := req.GetActions()
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d actions %v, want %d", tc.in, len(got), got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !proto.Equal(got[i], action(t, w)) {
				t.Errorf("%s: action %d = %v, want %s", tc.in, i, got[i], w)
			}
		}
	}
}

func TestDecodeAnthropic(t *testing.T) {
	check(t, Anthropic, []decodeCase{
		{`{"action":"screenshot"}`, nil, shot},
		{`{"action":"cursor_position"}`, []string{`{"cursorPosition":{}}`}, cursor},
		{`{"action":"mouse_move","coordinate":[10,20]}`, []string{`{"mouseMove":{"to":{"x":10,"y":20}}}`}, shot},
		{`{"action":"left_click","coordinate":[1,2]}`, []string{`{"click":{"at":{"x":1,"y":2},"button":"MOUSE_BUTTON_LEFT","clicks":1}}`}, shot},
		{`{"action":"left_click"}`, []string{`{"click":{"button":"MOUSE_BUTTON_LEFT","clicks":1}}`}, shot},
		{`{"action":"left_click","coordinate":[1,2],"text":"ctrl+shift"}`, []string{`{"click":{"at":{"x":1,"y":2},"button":"MOUSE_BUTTON_LEFT","clicks":1,"holdKeys":["ctrl","shift"]}}`}, shot},
		{`{"action":"right_click","coordinate":[3,4]}`, []string{`{"click":{"at":{"x":3,"y":4},"button":"MOUSE_BUTTON_RIGHT","clicks":1}}`}, shot},
		{`{"action":"middle_click","coordinate":[3,4]}`, []string{`{"click":{"at":{"x":3,"y":4},"button":"MOUSE_BUTTON_MIDDLE","clicks":1}}`}, shot},
		{`{"action":"double_click","coordinate":[3,4]}`, []string{`{"click":{"at":{"x":3,"y":4},"button":"MOUSE_BUTTON_LEFT","clicks":2}}`}, shot},
		{`{"action":"triple_click","coordinate":[3,4]}`, []string{`{"click":{"at":{"x":3,"y":4},"button":"MOUSE_BUTTON_LEFT","clicks":3}}`}, shot},
		{`{"action":"left_click_drag","start_coordinate":[1,1],"coordinate":[50,60]}`, []string{`{"drag":{"path":[{"x":1,"y":1},{"x":50,"y":60}]}}`}, shot},
		{`{"action":"left_mouse_down"}`, []string{`{"button":{"button":"MOUSE_BUTTON_LEFT","down":true}}`}, shot},
		{`{"action":"left_mouse_up","coordinate":[5,6]}`, []string{`{"mouseMove":{"to":{"x":5,"y":6}}}`, `{"button":{"button":"MOUSE_BUTTON_LEFT"}}`}, shot},
		{`{"action":"scroll","coordinate":[5,6],"scroll_direction":"down","scroll_amount":3}`, []string{`{"scroll":{"at":{"x":5,"y":6},"deltaY":3}}`}, shot},
		{`{"action":"scroll","scroll_direction":"up","scroll_amount":2,"text":"ctrl"}`, []string{`{"scroll":{"deltaY":-2,"holdKeys":["ctrl"]}}`}, shot},
		{`{"action":"scroll","coordinate":[0,0],"scroll_direction":"left","scroll_amount":1}`, []string{`{"scroll":{"at":{},"deltaX":-1}}`}, shot},
		{`{"action":"scroll","coordinate":[0,0],"scroll_direction":"right","scroll_amount":5}`, []string{`{"scroll":{"at":{},"deltaX":5}}`}, shot},
		{`{"action":"key","text":"ctrl+shift+t"}`, []string{`{"key":{"chord":"ctrl+shift+t"}}`}, shot},
		{`{"action":"key","text":"Return"}`, []string{`{"key":{"chord":"Return"}}`}, shot},
		{`{"action":"key","text":"super"}`, []string{`{"key":{"chord":"super"}}`}, shot},
		{`{"action":"hold_key","text":"shift","duration":1.5}`, []string{`{"key":{"chord":"shift","hold":"1.500s"}}`}, shot},
		{`{"action":"type","text":"héllo 世界\n"}`, []string{`{"type":{"text":"héllo 世界\n"}}`}, shot},
		{`{"action":"wait","duration":2}`, []string{`{"wait":{"duration":"2s"}}`}, shot},
		{`{"action":"zoom","region":[10,20,110,70]}`, []string{`{"zoom":{"region":{"x":10,"y":20,"width":100,"height":50}}}`}, zoomed},
	})
}

func TestDecodeOpenAI(t *testing.T) {
	check(t, OpenAI, []decodeCase{
		{`{"type":"screenshot"}`, nil, shot},
		{`{"type":"click","button":"left","x":10,"y":20}`, []string{`{"click":{"at":{"x":10,"y":20},"button":"MOUSE_BUTTON_LEFT","clicks":1}}`}, shot},
		{`{"type":"click","button":"right","x":10,"y":20}`, []string{`{"click":{"at":{"x":10,"y":20},"button":"MOUSE_BUTTON_RIGHT","clicks":1}}`}, shot},
		{`{"type":"click","button":"wheel","x":10,"y":20}`, []string{`{"click":{"at":{"x":10,"y":20},"button":"MOUSE_BUTTON_MIDDLE","clicks":1}}`}, shot},
		{`{"type":"click","button":"back","x":10,"y":20}`, []string{`{"click":{"at":{"x":10,"y":20},"button":"MOUSE_BUTTON_BACK","clicks":1}}`}, shot},
		{`{"type":"click","button":"forward","x":10,"y":20}`, []string{`{"click":{"at":{"x":10,"y":20},"button":"MOUSE_BUTTON_FORWARD","clicks":1}}`}, shot},
		{`{"type":"click","button":"left","x":1,"y":2,"keys":["SHIFT"]}`, []string{`{"click":{"at":{"x":1,"y":2},"button":"MOUSE_BUTTON_LEFT","clicks":1,"holdKeys":["shift"]}}`}, shot},
		{`{"type":"double_click","x":7,"y":8}`, []string{`{"click":{"at":{"x":7,"y":8},"button":"MOUSE_BUTTON_LEFT","clicks":2}}`}, shot},
		{`{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4},{"x":5,"y":6}]}`, []string{`{"drag":{"path":[{"x":1,"y":2},{"x":3,"y":4},{"x":5,"y":6}]}}`}, shot},
		{`{"type":"keypress","keys":["CTRL","A"]}`, []string{`{"key":{"chord":"ctrl+a"}}`}, shot},
		{`{"type":"keypress","keys":["ENTER"]}`, []string{`{"key":{"chord":"Return"}}`}, shot},
		{`{"type":"keypress","keys":["CTRL","SHIFT","ARROWLEFT"]}`, []string{`{"key":{"chord":"ctrl+shift+Left"}}`}, shot},
		{`{"type":"keypress","keys":["CTRL","+"]}`, []string{`{"key":{"chord":"ctrl+plus"}}`}, shot},
		{`{"type":"move","x":100,"y":200}`, []string{`{"mouseMove":{"to":{"x":100,"y":200}}}`}, shot},
		{`{"type":"scroll","x":100,"y":200,"scroll_x":0,"scroll_y":300}`, []string{`{"scroll":{"at":{"x":100,"y":200},"deltaY":3}}`}, shot},
		{`{"type":"scroll","x":100,"y":200,"scroll_x":-40,"scroll_y":0}`, []string{`{"scroll":{"at":{"x":100,"y":200},"deltaX":-1}}`}, shot},
		{`{"type":"type","text":"Grüße"}`, []string{`{"type":{"text":"Grüße"}}`}, shot},
		{`{"type":"wait"}`, []string{`{"wait":{"duration":"1s"}}`}, shot},
		{`[{"type":"move","x":1,"y":2},{"type":"screenshot"},{"type":"click","x":3,"y":4}]`, []string{`{"mouseMove":{"to":{"x":1,"y":2}}}`, `{"click":{"at":{"x":3,"y":4},"button":"MOUSE_BUTTON_LEFT","clicks":1}}`}, shot},
		{`{"type":"scroll","x":1,"y":1,"scroll_y":-1e308}`, []string{`{"scroll":{"at":{"x":1,"y":1},"deltaY":-100}}`}, shot},
		{`{"type":"wait","ms":250}`, []string{`{"wait":{"duration":"0.250s"}}`}, shot},
	})
}

func TestDecodeGemini(t *testing.T) {
	check(t, Gemini, []decodeCase{
		{`{"name":"open_web_browser","args":{}}`, nil, shot},
		{`{"name":"wait_5_seconds","args":{}}`, []string{`{"wait":{"duration":"5s"}}`}, shot},
		{`{"name":"hover_at","args":{"x":10,"y":20}}`, []string{`{"mouseMove":{"to":{"x":10,"y":20}}}`}, shot},
		{`{"name":"type_text_at","args":{"x":1,"y":2,"text":"hi","press_enter":false,"clear_before_typing":false}}`,
			[]string{`{"click":{"at":{"x":1,"y":2},"button":"MOUSE_BUTTON_LEFT","clicks":1}}`, `{"type":{"text":"hi"}}`}, shot},
		{`{"name":"key_combination","args":{"keys":"Control+A"}}`, []string{`{"key":{"chord":"ctrl+a"}}`}, shot},
		{`{"name":"key_combination","args":{"keys":"Control++"}}`, []string{`{"key":{"chord":"ctrl+plus"}}`}, shot},
		{`{"name":"key_combination","args":{"keys":"Enter"}}`, []string{`{"key":{"chord":"Return"}}`}, shot},
		{`{"name":"scroll_at","args":{"x":5,"y":6,"direction":"down","magnitude":800}}`, []string{`{"scroll":{"at":{"x":5,"y":6},"deltaY":8}}`}, shot},
		{`{"name":"scroll_document","args":{"direction":"left"}}`, []string{`{"scroll":{"deltaX":-5}}`}, shot},
		{`{"name":"drag_and_drop","args":{"x":1,"y":2,"destination_x":30,"destination_y":40}}`, []string{`{"drag":{"path":[{"x":1,"y":2},{"x":30,"y":40}]}}`}, shot},
		{`{"name":"go_back","args":{}}`, []string{`{"key":{"chord":"alt+Left"}}`}, shot},
		{`{"name":"go_forward","args":{}}`, []string{`{"key":{"chord":"alt+Right"}}`}, shot},
		{`{"name":"search","args":{}}`, []string{`{"key":{"chord":"ctrl+l"}}`, `{"type":{"text":"https://www.google.com"}}`, `{"key":{"chord":"Return"}}`}, shot},
	})
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		d  Dialect
		in string
	}{
		{Anthropic, `not json`},
		{Anthropic, `{}`},
		{Anthropic, `{"action":"fly"}`},
		{Anthropic, `{"action":"mouse_move"}`},
		{Anthropic, `{"action":"mouse_move","coordinate":[1]}`},
		{Anthropic, `{"action":"mouse_move","coordinate":[-1,5]}`},
		{Anthropic, `{"action":"mouse_move","coordinate":[1.5,5]}`},
		{Anthropic, `{"action":"mouse_move","coordinate":[1,5],"text":"x"}`},
		{Anthropic, `{"action":"left_click","coordinate":[1,2],"text":"nokey"}`},
		{Anthropic, `{"action":"left_click_drag","coordinate":[1,2]}`},
		{Anthropic, `{"action":"scroll","scroll_direction":"sideways","scroll_amount":1}`},
		{Anthropic, `{"action":"scroll","scroll_direction":"up"}`},
		{Anthropic, `{"action":"scroll","scroll_direction":"up","scroll_amount":0}`},
		{Anthropic, `{"action":"scroll","scroll_direction":"up","scroll_amount":1000}`},
		{Anthropic, `{"action":"key"}`},
		{Anthropic, `{"action":"key","text":"ctrl+nosuchkey"}`},
		{Anthropic, `{"action":"hold_key","text":"shift"}`},
		{Anthropic, `{"action":"hold_key","text":"shift","duration":-1}`},
		{Anthropic, `{"action":"hold_key","text":"shift","duration":1000}`},
		{Anthropic, `{"action":"type","text":""}`},
		{Anthropic, `{"action":"type","text":"bell\u0007"}`},
		{Anthropic, `{"action":"wait"}`},
		{Anthropic, `{"action":"zoom","region":[10,10,5,20]}`},
		{Anthropic, `{"action":"zoom","region":[1,2,3]}`},
		{OpenAI, `{"type":"click","x":1}`},
		{OpenAI, `{"type":"click","button":"thumb","x":1,"y":1}`},
		{OpenAI, `{"type":"drag","path":[{"x":1,"y":1}]}`},
		{OpenAI, `{"type":"drag","path":[{"x":1,"y":1},{"x":2}]}`},
		{OpenAI, `{"type":"keypress","keys":[]}`},
		{OpenAI, `{"type":"keypress","keys":["NOPE"]}`},
		{OpenAI, `{"type":"scroll","x":1,"y":1,"scroll_x":0,"scroll_y":0}`},
		{OpenAI, `{"type":"type"}`},
		{OpenAI, `{"type":"teleport"}`},
		{OpenAI, `[]`},
		{OpenAI, `[{"type":"click","x":1,"y":1},{"type":"fly"}]`},
		{OpenAI, `{"type":"wait","ms":0}`},
		{OpenAI, `{"type":"wait","ms":1e9}`},
		{Gemini, `{`},
		{Gemini, `{"args":{}}`},
		{Gemini, `{"name":"fly","args":{}}`},
		{Gemini, `{"name":"click_at","args":{"x":1}}`},
		{Gemini, `{"name":"click_at","args":{"x":1.5,"y":1}}`},
		{Gemini, `{"name":"type_text_at","args":{"x":1,"y":1,"text":"bell\u0007"}}`},
		{Gemini, `{"name":"key_combination","args":{"keys":"control+nosuchkey"}}`},
		{Gemini, `{"name":"key_combination","args":{}}`},
		{Gemini, `{"name":"scroll_document","args":{"direction":"sideways"}}`},
		{Gemini, `{"name":"scroll_at","args":{"x":1,"y":1,"direction":"up","magnitude":-5}}`},
		{Gemini, `{"name":"drag_and_drop","args":{"x":1,"y":1}}`},
		{Gemini, `{"name":"navigate","args":{}}`},
		{"klingon", `{"action":"screenshot"}`},
	} {
		if p, err := Decode(tc.d, json.RawMessage(tc.in), Scale{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s %s: plan %v, err = %v, want ErrInvalid", tc.d, tc.in, p, err)
		}
	}
}

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

// Decoding with a Scale: model coordinates become display coordinates,
// clamped to the screen.
func TestDecodeScaled(t *testing.T) {
	// A 2560x1600 screen seen by the model at 1280x800: coordinates double.
	half := Scale{DisplayW: 2560, DisplayH: 1600, ModelW: 1280, ModelH: 800}
	same := Scale{DisplayW: 1280, DisplayH: 800, ModelW: 1280, ModelH: 800}
	tests := []struct {
		name    string
		dialect Dialect
		sc      Scale
		input   string
		want    string
		err     string
		shot    bool
		cursor  bool
		zoom    *displayv1.Rect
	}{
		{name: "screenshot", dialect: Anthropic, sc: same, input: `{"action":"screenshot"}`, want: "", shot: true},
		{name: "click scaled", dialect: Anthropic, sc: half, input: `{"action":"left_click","coordinate":[100,200]}`,
			want: "click: { at: { x: 200 y: 400 } button: MOUSE_BUTTON_LEFT clicks: 1 }", shot: true},
		{name: "click clamped", dialect: Anthropic, sc: same, input: `{"action":"left_click","coordinate":[5000,-3]}`,
			want: "click: { at: { x: 1279 } button: MOUSE_BUTTON_LEFT clicks: 1 }", shot: true},
		{name: "shift click", dialect: Anthropic, sc: same, input: `{"action":"left_click","coordinate":[1,2],"text":"shift"}`,
			want: `click: { at: { x: 1 y: 2 } button: MOUSE_BUTTON_LEFT clicks: 1 hold_keys: "shift" }`, shot: true},
		{name: "triple click", dialect: Anthropic, sc: same, input: `{"action":"triple_click","coordinate":[1,2]}`,
			want: "click: { at: { x: 1 y: 2 } button: MOUSE_BUTTON_LEFT clicks: 3 }", shot: true},
		{name: "keys", dialect: Anthropic, sc: same, input: `{"action":"key","text":"ctrl+s Return"}`,
			want: `key: { chord: "ctrl+s" } | key: { chord: "Return" }`, shot: true},
		{name: "type", dialect: Anthropic, sc: same, input: `{"action":"type","text":"héllo"}`,
			want: `type: { text: "héllo" }`, shot: true},
		{name: "scroll", dialect: Anthropic, sc: same, input: `{"action":"scroll","coordinate":[10,10],"scroll_direction":"up","scroll_amount":3}`,
			want: "scroll: { at: { x: 10 y: 10 } delta_y: -3 }", shot: true},
		{name: "drag", dialect: Anthropic, sc: half, input: `{"action":"left_click_drag","start_coordinate":[1,1],"coordinate":[5,5]}`,
			want: "drag: { path: { x: 2 y: 2 } path: { x: 10 y: 10 } }", shot: true},
		{name: "cursor", dialect: Anthropic, sc: same, input: `{"action":"cursor_position"}`, want: "cursor_position: {}", cursor: true},
		{name: "zoom", dialect: Anthropic, sc: same, input: `{"action":"zoom","region":[10,20,110,70]}`, shot: true,
			zoom: &displayv1.Rect{X: 10, Y: 20, Width: 100, Height: 50}},
		{name: "click where the pointer is", dialect: Anthropic, sc: same, input: `{"action":"left_click"}`,
			want: "click: { button: MOUSE_BUTTON_LEFT clicks: 1 }", shot: true},
		{name: "move without coordinate", dialect: Anthropic, sc: same, input: `{"action":"mouse_move"}`, err: "needs coordinate"},
		{name: "bad scroll", dialect: Anthropic, sc: same, input: `{"action":"scroll","coordinate":[1,1],"scroll_direction":"sideways"}`, err: "scroll_direction"},
		{name: "unknown action", dialect: Anthropic, sc: same, input: `{"action":"dance"}`, err: "unknown computer action"},
		{name: "not json", dialect: Anthropic, sc: same, input: `{`, err: "not valid JSON"},

		{name: "openai batch", dialect: OpenAI, sc: half, input: `[{"type":"click","button":"right","x":10,"y":20},{"type":"keypress","keys":["CTRL","A"]},{"type":"scroll","x":1,"y":1,"scroll_y":-250}]`,
			want: `click: { at: { x: 20 y: 40 } button: MOUSE_BUTTON_RIGHT clicks: 1 } | key: { chord: "ctrl+a" } | scroll: { at: { x: 2 y: 2 } delta_y: -2 }`, shot: true},
		{name: "openai drag", dialect: OpenAI, sc: same, input: `[{"type":"drag","path":[{"x":1,"y":1},{"x":9,"y":9}]}]`,
			want: "drag: { path: { x: 1 y: 1 } path: { x: 9 y: 9 } }", shot: true},
		{name: "openai back button", dialect: OpenAI, sc: same, input: `[{"type":"click","button":"back","x":1,"y":1}]`,
			want: "click: { at: { x: 1 y: 1 } button: MOUSE_BUTTON_BACK clicks: 1 }", shot: true},

		{name: "gemini click on the grid", dialect: Gemini, sc: same, input: `{"name":"click_at","args":{"x":500,"y":250}}`,
			want: "click: { at: { x: 640 y: 200 } button: MOUSE_BUTTON_LEFT clicks: 1 }", shot: true},
		{name: "gemini type and enter", dialect: Gemini, sc: same, input: `{"name":"type_text_at","args":{"x":0,"y":0,"text":"hi"}}`,
			want: `click: { at: {} button: MOUSE_BUTTON_LEFT clicks: 1 } | key: { chord: "ctrl+a" } | key: { chord: "BackSpace" } | type: { text: "hi" } | key: { chord: "Return" }`, shot: true},
		{name: "gemini navigate", dialect: Gemini, sc: same, input: `{"name":"navigate","args":{"url":"https://example.com"}}`,
			want: `key: { chord: "ctrl+l" } | type: { text: "https://example.com" } | key: { chord: "Return" }`, shot: true},
		{name: "gemini unknown", dialect: Gemini, sc: same, input: `{"name":"fly","args":{}}`, err: "unknown computer function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decode(tt.dialect, json.RawMessage(tt.input), tt.sc)
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

func TestHoldDuration(t *testing.T) {
	p, err := Decode(Anthropic, json.RawMessage(`{"action":"hold_key","text":"a","duration":0.25}`), Scale{})
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Actions[0].GetKey().GetHold().AsDuration(); d != 250*time.Millisecond {
		t.Fatalf("hold %v, want 250ms", d)
	}
}

// A zoom is sent as the last action, at the size the model sees, in place
// of the screenshot.
func TestRequestZoom(t *testing.T) {
	p, err := Decode(Anthropic, json.RawMessage(`{"action":"zoom","region":[10,20,110,70]}`),
		Scale{DisplayW: 2560, DisplayH: 1600, ModelW: 1280, ModelH: 800})
	if err != nil {
		t.Fatal(err)
	}
	req := p.Request(&displayv1.Size{Width: 1280, Height: 800})
	want := action(t, `{"zoom":{"region":{"x":20,"y":40,"width":200,"height":100},"size":{"width":1280,"height":800}}}`)
	if req.GetScreenshot() || len(req.GetActions()) != 1 || !proto.Equal(req.GetActions()[0], want) {
		t.Fatalf("request %v, want only %v", req, want)
	}
}

// FuzzDecode: whatever a model sends, in any dialect and at any scale, the
// decoder either refuses it with ErrInvalid or returns a plan of complete
// actions whose points lie on the screen.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"action":"left_click","coordinate":[1,2],"text":"shift"}`,
		`{"action":"zoom","region":[0,0,10,10]}`,
		`{"action":"scroll","scroll_direction":"up","scroll_amount":3}`,
		`{"action":"key","text":"ctrl+s Return"}`,
		`{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}]}`,
		`{"type":"keypress","keys":["CTRL","+"]}`,
		`{"type":"scroll","x":1,"y":2,"scroll_y":-1e308}`,
		`[{"type":"click","button":"right","x":10,"y":20},{"type":"wait","ms":5}]`,
		`{"name":"type_text_at","args":{"x":999,"y":0,"text":"hi"}}`,
		`{"name":"key_combination","args":{"keys":"Control++"}}`,
		`{"name":"scroll_document","args":{"direction":"down","magnitude":1e300}}`,
	} {
		f.Add([]byte(s))
	}
	scales := []Scale{{}, {DisplayW: 1280, DisplayH: 800, ModelW: 1024, ModelH: 640}}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, d := range []Dialect{Anthropic, OpenAI, Gemini} {
			for _, sc := range scales {
				p, err := Decode(d, json.RawMessage(in), sc)
				if err != nil {
					if !errors.Is(err, ErrInvalid) || p != nil {
						t.Fatalf("%s: plan %v, error %v is not ErrInvalid", d, p, err)
					}
					continue
				}
				if !p.Screenshot && !p.CursorOnly {
					t.Fatalf("%s: plan answers nothing", d)
				}
				for _, a := range p.Request(nil).GetActions() {
					if a.GetAction() == nil {
						t.Fatalf("%s: empty action", d)
					}
					if sc.DisplayW > 0 {
						onScreen(t, sc, a)
					}
				}
			}
		}
	})
}

func onScreen(t *testing.T, sc Scale, a *displayv1.Action) {
	t.Helper()
	pts := []*displayv1.Point{a.GetClick().GetAt(), a.GetMouseMove().GetTo(), a.GetScroll().GetAt()}
	pts = append(pts, a.GetDrag().GetPath()...)
	if r := a.GetZoom().GetRegion(); r != nil {
		pts = append(pts, &displayv1.Point{X: r.GetX() + r.GetWidth() - 1, Y: r.GetY() + r.GetHeight() - 1})
	}
	for _, p := range pts {
		if p != nil && (p.GetX() < 0 || p.GetY() < 0 || int(p.GetX()) >= sc.DisplayW || int(p.GetY()) >= sc.DisplayH) {
			t.Fatalf("point %v is off the %dx%d screen", p, sc.DisplayW, sc.DisplayH)
		}
	}
}
