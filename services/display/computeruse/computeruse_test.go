package computeruse

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
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

type decodeCase struct {
	in    string
	want  []string
	extra Extra
}

func check(t *testing.T, decode func(json.RawMessage) ([]*displayv1.Action, Extra, error), cases []decodeCase) {
	t.Helper()
	for _, tc := range cases {
		got, extra, err := decode(json.RawMessage(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if extra != tc.extra {
			t.Errorf("%s: extra %+v, want %+v", tc.in, extra, tc.extra)
		}
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

var shot = Extra{Screenshot: true}

func TestDecodeAnthropic(t *testing.T) {
	check(t, DecodeAnthropic, []decodeCase{
		{`{"action":"screenshot"}`, []string{`{"cursorPosition":{}}`}, shot},
		{`{"action":"cursor_position"}`, []string{`{"cursorPosition":{}}`}, Extra{Cursor: true}},
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
		{`{"action":"zoom","region":[10,20,110,70]}`, []string{`{"zoom":{"region":{"x":10,"y":20,"width":100,"height":50}}}`}, Extra{Zoom: true}},
	})
}

func TestDecodeOpenAI(t *testing.T) {
	check(t, DecodeOpenAI, []decodeCase{
		{`{"type":"screenshot"}`, []string{`{"cursorPosition":{}}`}, shot},
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
	})
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		openAI bool
		in     string
	}{
		{false, `not json`},
		{false, `{}`},
		{false, `{"action":"fly"}`},
		{false, `{"action":"mouse_move"}`},
		{false, `{"action":"mouse_move","coordinate":[1]}`},
		{false, `{"action":"mouse_move","coordinate":[-1,5]}`},
		{false, `{"action":"mouse_move","coordinate":[1.5,5]}`},
		{false, `{"action":"mouse_move","coordinate":[1,5],"text":"x"}`},
		{false, `{"action":"left_click","coordinate":[1,2],"text":"nokey"}`},
		{false, `{"action":"left_click_drag","coordinate":[1,2]}`},
		{false, `{"action":"scroll","scroll_direction":"sideways","scroll_amount":1}`},
		{false, `{"action":"scroll","scroll_direction":"up"}`},
		{false, `{"action":"scroll","scroll_direction":"up","scroll_amount":0}`},
		{false, `{"action":"scroll","scroll_direction":"up","scroll_amount":1000}`},
		{false, `{"action":"key"}`},
		{false, `{"action":"key","text":"ctrl+nosuchkey"}`},
		{false, `{"action":"hold_key","text":"shift"}`},
		{false, `{"action":"hold_key","text":"shift","duration":-1}`},
		{false, `{"action":"hold_key","text":"shift","duration":1000}`},
		{false, `{"action":"type","text":""}`},
		{false, `{"action":"type","text":"bell\u0007"}`},
		{false, `{"action":"wait"}`},
		{false, `{"action":"zoom","region":[10,10,5,20]}`},
		{false, `{"action":"zoom","region":[1,2,3]}`},
		{true, `{"type":"click","x":1}`},
		{true, `{"type":"click","button":"thumb","x":1,"y":1}`},
		{true, `{"type":"drag","path":[{"x":1,"y":1}]}`},
		{true, `{"type":"drag","path":[{"x":1,"y":1},{"x":2}]}`},
		{true, `{"type":"keypress","keys":[]}`},
		{true, `{"type":"keypress","keys":["NOPE"]}`},
		{true, `{"type":"scroll","x":1,"y":1,"scroll_x":0,"scroll_y":0}`},
		{true, `{"type":"type"}`},
		{true, `{"type":"teleport"}`},
		{true, `[]`},
	} {
		decode := DecodeAnthropic
		if tc.openAI {
			decode = DecodeOpenAI
		}
		if _, _, err := decode(json.RawMessage(tc.in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.in, err)
		}
	}
}

func TestHoldDuration(t *testing.T) {
	acts, _, err := DecodeAnthropic(json.RawMessage(`{"action":"hold_key","text":"a","duration":0.25}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := acts[0].GetKey().GetHold().AsDuration(); d != 250*time.Millisecond {
		t.Fatalf("hold %v, want 250ms", d)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"action":"left_click","coordinate":[1,2],"text":"shift"}`,
		`{"action":"zoom","region":[0,0,10,10]}`,
		`{"action":"scroll","scroll_direction":"up","scroll_amount":3}`,
		`{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}]}`,
		`{"type":"keypress","keys":["CTRL","+"]}`,
		`{"type":"scroll","x":1,"y":2,"scroll_y":-1e308}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, decode := range []func(json.RawMessage) ([]*displayv1.Action, Extra, error){DecodeAnthropic, DecodeOpenAI} {
			acts, _, err := decode(json.RawMessage(in))
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("error %v is not ErrInvalid", err)
				}
				continue
			}
			if len(acts) == 0 {
				t.Fatal("no actions and no error")
			}
			for _, a := range acts {
				if a.GetAction() == nil {
					t.Fatal("empty action")
				}
			}
		}
	})
}
