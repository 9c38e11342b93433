package display

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/computeruse"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

func perform(t *testing.T, c displayv1.DisplayServiceClient, id, input string, openAI bool) *displayv1.PerformActionsResponse {
	t.Helper()
	dialect := computeruse.Anthropic
	if openAI {
		dialect = computeruse.OpenAI
	}
	plan, err := computeruse.Decode(dialect, json.RawMessage(input), computeruse.Scale{})
	if err != nil {
		t.Fatal(err)
	}
	req := plan.Request(nil)
	req.SessionId = id
	resp, err := c.PerformActions(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestComputerUseActionsArrive(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "cu", 400, 300)
	iw := newInputWindow(t, s, "cu", 400, 300)

	t.Run("triple_click", func(t *testing.T) {
		perform(t, c, "cu", `{"action":"triple_click","coordinate":[30,40]}`, false)
		evs := iw.collect(t, 6, isButton)
		for i, ev := range evs {
			switch e := ev.(type) {
			case xproto.ButtonPressEvent:
				if i%2 != 0 || e.Detail != 1 || e.EventX != 30 || e.EventY != 40 {
					t.Errorf("event %d: press %d at %d,%d", i, e.Detail, e.EventX, e.EventY)
				}
			case xproto.ButtonReleaseEvent:
				if i%2 != 1 || e.Detail != 1 {
					t.Errorf("event %d: release %d", i, e.Detail)
				}
			}
		}
	})

	t.Run("hold_key", func(t *testing.T) {
		perform(t, c, "cu", `{"action":"hold_key","text":"shift","duration":0.2}`, false)
		evs := iw.collect(t, 2, isKey)
		press, ok1 := evs[0].(xproto.KeyPressEvent)
		rel, ok2 := evs[1].(xproto.KeyReleaseEvent)
		if !ok1 || !ok2 {
			t.Fatalf("events %v, want press then release", evs)
		}
		if sym := iw.keysym(press.Detail, 0); sym != 0xffe1 {
			t.Errorf("held keysym %#x, want Shift_L", sym)
		}
		// The server's own timestamps: the key was down for the whole hold.
		if held := rel.Time - press.Time; held < 200 {
			t.Errorf("key held %d ms by the server's clock, want at least 200", held)
		}
	})

	t.Run("openai back button", func(t *testing.T) {
		perform(t, c, "cu", `{"type":"click","button":"back","x":5,"y":6}`, true)
		ev := iw.next(t, "press", func(ev xgb.Event) bool { _, ok := ev.(xproto.ButtonPressEvent); return ok }).(xproto.ButtonPressEvent)
		if ev.Detail != 8 {
			t.Errorf("back pressed button %d, want 8", ev.Detail)
		}
	})

	t.Run("cursor_position and zoom", func(t *testing.T) {
		resp := perform(t, c, "cu", `{"action":"cursor_position"}`, false)
		if p := resp.GetCursor(); p.GetX() != 5 || p.GetY() != 6 {
			t.Errorf("cursor %v, want 5,6", p)
		}
		showWindow(t, iw.c, 100, 100, 20, 10, 0xff0000, 0)
		testkit.Eventually(t, 5*time.Second, func() bool {
			resp := perform(t, c, "cu", `{"action":"zoom","region":[100,100,120,110]}`, false)
			if len(resp.GetImages()) != 1 {
				t.Fatalf("zoom gave %d images", len(resp.GetImages()))
			}
			img := decodePNG(t, resp.GetImages()[0].GetData())
			if b := img.Bounds(); b.Dx() != 20 || b.Dy() != 10 {
				t.Fatalf("zoom image %v, want 20x10 (full resolution)", b)
			}
			return isRed(img.At(0, 0)) && isRed(img.At(19, 9))
		}, "red zoom")
	})
}
