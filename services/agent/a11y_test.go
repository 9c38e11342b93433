package agent

import (
	"context"
	"strings"
	"testing"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// GetAccessibilityTree gives a window with a button in its middle, as the
// sandbox reads it from a desktop.
func (f *fakeNode) GetAccessibilityTree(_ context.Context, req *sandboxv1.GetAccessibilityTreeRequest) (*sandboxv1.GetAccessibilityTreeResponse, error) {
	button := &sandboxv1.AccessibleNode{Role: "push button", Name: "Press me", States: []string{"focused", "showing", "visible"},
		Actions: []string{"press"}, Bounds: &sandboxv1.AccessibleBounds{X: 640, Y: 400, Width: 128, Height: 40}}
	filler := &sandboxv1.AccessibleNode{Role: "panel", Children: []*sandboxv1.AccessibleNode{button}}
	frame := &sandboxv1.AccessibleNode{Role: "frame", Name: "Form - Chromium", Bounds: &sandboxv1.AccessibleBounds{Width: 1280, Height: 800}, Children: []*sandboxv1.AccessibleNode{filler}}
	return &sandboxv1.GetAccessibilityTreeResponse{NodeCount: 4, Applications: []*sandboxv1.AccessibleNode{
		{Role: "application", Name: "Chromium", Children: []*sandboxv1.AccessibleNode{frame}},
	}}, nil
}

// TestAccessibilityTreeBesideScreenshots runs the wire script with the
// run option accessibility_tree on each provider's real SDK against its
// fake server: the request after an action carries the tree as text
// beside the screenshot, the button's bounds in the model's pixels
// (Gemini's 0-999 grid); only the newest screenshot's tree stays in the
// context, as only its pixels do.
func TestAccessibilityTreeBesideScreenshots(t *testing.T) {
	const heading = "Accessibility tree of the screen"
	bounds := map[string]string{"anthropic": "@640,400 128x40", "openai": "@640,400 128x40", "gemini": "@500,500 100x50"}
	for _, tc := range wireCases {
		t.Run(tc.provider, func(t *testing.T) {
			ws := newWireServer(t, tc.authHeader, tc.turn)
			h := newHarness(t, allowing(DefaultConfig(), ws.srv.URL), nil)
			created, err := h.client.CreateRun(context.Background(), &agentv1.CreateRunRequest{
				SessionId: "s-1", Prompt: "write the file", Provider: tc.provider, Model: tc.model,
				ApiKey: "sk-test", BaseUrl: tc.baseURL(ws.srv.URL),
				Options: &agentv1.RunOptions{AccessibilityTree: true, KeepScreenshots: 1},
			})
			if err != nil {
				t.Fatal(err)
			}
			run := waitState(t, h.client, created.GetRun().GetId(), agentv1.RunState_RUN_STATE_SUCCEEDED, agentv1.RunState_RUN_STATE_FAILED)
			if run.GetState() != agentv1.RunState_RUN_STATE_SUCCEEDED {
				t.Fatalf("run %v: %s", run.GetState(), run.GetStateReason())
			}
			bodies, _, _ := ws.requests()
			if len(bodies) != len(script) {
				t.Fatalf("%d requests, want %d", len(bodies), len(script))
			}
			// Request 2 answers the click (turn 1).
			for _, want := range []string{heading, "push button", "Press me", bounds[tc.provider], "(press)", "[focused]", tc.imageMark} {
				if !strings.Contains(bodies[2], want) {
					t.Errorf("the request after the click lacks %q: %.3000s", want, bodies[2])
				}
			}
			if strings.Contains(bodies[0], heading) {
				t.Errorf("the first request, before any action, has a tree")
			}
			if n := strings.Count(bodies[len(bodies)-1], heading); n != 1 {
				t.Errorf("the last request holds %d trees, want the newest screenshot's only", n)
			}
		})
	}
}
