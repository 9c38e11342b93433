package mcpserver_test

import (
	"context"
	"strings"
	"testing"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/sdk/mcpserver"
)

// TestToolsPassTheInputLease holds a session's input lease (token 7) and
// acts through the MCP tools: without lease_token, or with an older one,
// the display refuses them as it refuses REST; with the holder's token
// they go through; once the lease is given up, no token is needed.
func TestToolsPassTheInputLease(t *testing.T) {
	_, c, cs := inMemory(t)
	ctx := context.Background()
	s := structured[mcpserver.SessionInfo](t, call(t, cs, "create_session", map[string]any{"width": 640, "height": 480}))
	sess, err := c.Sessions.Get(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	move := []*displayv1.Action{{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{To: &displayv1.Point{X: 5, Y: 5}}}}}
	if _, err := sess.ActWith(ctx, &displayv1.PerformActionsRequest{LeaseToken: 7, Actions: move}); err != nil {
		t.Fatalf("take the lease: %v", err)
	}
	tools := []struct {
		name string
		args map[string]any
	}{
		{"click", map[string]any{"x": 10, "y": 10}},
		{"type_text", map[string]any{"text": "a"}},
		{"press_key", map[string]any{"chord": "Escape"}},
		{"scroll", map[string]any{"x": 10, "y": 10, "dy": 1}},
		{"move_mouse", map[string]any{"x": 20, "y": 20}},
		{"set_clipboard", map[string]any{"text": "leased"}},
	}
	with := func(args map[string]any, extra ...any) map[string]any {
		out := map[string]any{"session_id": s.ID}
		for k, v := range args {
			out[k] = v
		}
		for i := 0; i+1 < len(extra); i += 2 {
			out[extra[i].(string)] = extra[i+1]
		}
		return out
	}
	for _, tool := range tools {
		for _, args := range []map[string]any{with(tool.args), with(tool.args, "lease_token", 6)} {
			if res := call(t, cs, tool.name, args); !res.IsError || !strings.Contains(textOf(res), "lease") {
				t.Errorf("%s %v while another holds the lease: %v", tool.name, args, textOf(res))
			}
		}
		if res := call(t, cs, tool.name, with(tool.args, "lease_token", 7)); res.IsError {
			t.Errorf("%s by the holder: %v", tool.name, textOf(res))
		}
	}
	if _, err := sess.ActWith(ctx, &displayv1.PerformActionsRequest{LeaseToken: 7, ReleaseLease: true}); err != nil {
		t.Fatalf("give up the lease: %v", err)
	}
	if res := call(t, cs, "click", with(tools[0].args)); res.IsError {
		t.Errorf("a click once the lease is given up: %v", textOf(res))
	}
}
