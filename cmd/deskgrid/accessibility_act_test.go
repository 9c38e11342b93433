package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"github.com/deskgrid/deskgrid/services/platform/auth"
)

// actPage is the page TestAccessibilityTreeOfADesktopSession opens in
// Chromium: a field, and a button whose press writes the field's value
// below it.
const actPage = `<title>Form</title><h1>Sign up</h1>` +
	`<input aria-label="Email">` +
	`<button onclick="document.getElementById('out').textContent='Pressed with '+document.querySelector('input').value">Press me</button>` +
	`<p id="out">Waiting</p>`

// findText is the first node whose name or text contains s.
func findText(tree *sandboxv1.GetAccessibilityTreeResponse, s string) *sandboxv1.AccessibleNode {
	var walk func(n *sandboxv1.AccessibleNode) *sandboxv1.AccessibleNode
	walk = func(n *sandboxv1.AccessibleNode) *sandboxv1.AccessibleNode {
		if strings.Contains(n.GetName(), s) || strings.Contains(n.GetText(), s) {
			return n
		}
		for _, c := range n.GetChildren() {
			if f := walk(c); f != nil {
				return f
			}
		}
		return nil
	}
	for _, a := range tree.GetApplications() {
		if f := walk(a); f != nil {
			return f
		}
	}
	return nil
}

func dumpTree(tree *sandboxv1.GetAccessibilityTreeResponse) string {
	var b strings.Builder
	_ = deskgrid.WriteAccessibilityTree(&b, tree)
	return b.String()
}

// actThroughTheTree acts on Mousepad (launched in s as l) and on
// Chromium's page (open in s) through the accessibility tree, by REST, the
// Go SDK, the CLI and MCP: Mousepad's text set and read back, then its
// ids stale once it exits; the page's field focused and typed into, its
// button pressed and the effect seen, one window's subtree read; what a
// node cannot do, bad and unknown ids are refused with the right status;
// each act is in the session's history.
func actThroughTheTree(t *testing.T, p *upProcess, s *deskgrid.Session, l *deskgrid.Launched) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := s.GetId()
	var deadline time.Time
	chrome := func() *sandboxv1.GetAccessibilityTreeResponse {
		t.Helper()
		tr, err := s.AccessibilityTree(ctx, deskgrid.Application("chrom"), deskgrid.OnlyVisible())
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	act := func(body string) (int, string) {
		t.Helper()
		code, b, _ := p.do("POST", "/v1/sessions/"+id+"/accessibility:act", body)
		return code, string(b)
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }

	// Mousepad (GTK 3) through MCP: its text view's contents set, read
	// back from the tree.
	var view *sandboxv1.AccessibleNode
	deadline = time.Now().Add(time.Minute)
	for view == nil {
		mt, err := s.AccessibilityTree(ctx, deskgrid.Application("mousepad"))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range deskgrid.FindAccessible(mt, "text", "") {
			if slices.Contains(n.GetStates(), "editable") {
				view = n
			}
		}
		if view == nil && time.Now().After(deadline) {
			t.Fatalf("no editable text in Mousepad:\n%s", dumpTree(mt))
		}
		if view == nil {
			time.Sleep(500 * time.Millisecond) // polled: the window's widgets appear as it starts
		}
	}
	cs := mcpOverHTTP(t, ctx, p.httpURL, p.key)
	// Set text through REST; the reply holds the node's new text.
	start := time.Now()
	code, body := act(js(map[string]any{"id": view.GetId(), "text": "ann@example.com"}))
	t.Logf("set text through REST: %v", time.Since(start))
	var reply sandboxv1.ActOnAccessibleResponse
	if err := protojson.Unmarshal([]byte(body), &reply); code != http.StatusOK || err != nil || reply.GetNode().GetText() != "ann@example.com" || reply.GetNode().GetId() != view.GetId() {
		t.Fatalf("set text through REST: %d %v %s", code, err, body)
	}
	// Then through MCP; the tree holds it.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "accessible_act", Arguments: map[string]any{
		"session_id": id, "id": view.GetId(), "text": "Grüße from the tree\nline two",
	}})
	if err != nil || res.IsError {
		t.Fatalf("accessible_act: %v %v", err, res)
	}
	mt, err := s.AccessibilityTree(ctx, deskgrid.Root(view.GetId()))
	if err != nil || len(mt.GetApplications()) != 1 || mt.GetApplications()[0].GetText() != "Grüße from the tree\nline two" {
		t.Fatalf("Mousepad's text after accessible_act: %v\n%s", err, dumpTree(mt))
	}
	// A role and name that find several nodes are refused, listing them.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "accessible_act", Arguments: map[string]any{
		"session_id": id, "application": "mousepad", "role": "menu", "action": "click",
	}})
	if err != nil || !res.IsError {
		t.Errorf("accessible_act on many menus: %v %v", err, res)
	}

	// The application exits: its ids are stale, NotFound.
	conn, err := dial(p.grpc, grpc.WithPerRPCCredentials(auth.KeyCredentials(p.key)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := sandboxv1.NewSandboxServiceClient(conn).StopProcess(ctx, &sandboxv1.StopProcessRequest{SessionId: id, ProcessId: l.Process.GetProcessId()}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		code, body := act(js(map[string]any{"id": view.GetId(), "text": "too late"}))
		if code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acting on an exited application's node: %d %s, want 404", code, body)
		}
		time.Sleep(200 * time.Millisecond) // polled: the process ends after StopProcess returns
	}

	tree := chrome()
	entries := deskgrid.FindAccessible(tree, "entry", "Email")
	buttons := deskgrid.FindAccessible(tree, "push button", "Press me")
	if len(entries) != 1 || len(buttons) != 1 {
		t.Fatalf("the page's field and button:\n%s", dumpTree(tree))
	}
	entry, button := entries[0], buttons[0]

	// Chromium gives its fields no EditableText: setting one is a
	// precondition that says what the field offers instead.
	if code, body := act(js(map[string]any{"id": entry.GetId(), "text": "ann@example.com"})); code != http.StatusBadRequest || !strings.Contains(body, "no editable text") || !strings.Contains(body, "focus") {
		t.Errorf("set text on Chromium's field: %d %s", code, body)
	}
	// Its window in front again (Mousepad was), for the keyboard.
	wins, err := s.Windows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wins {
		if strings.Contains(w.GetTitle(), "Form") {
			if _, err := s.ActivateWindow(ctx, w.GetId()); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Focus the field through the CLI, naming it by role and name.
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"a11y", id, "focus", "-addr", p.grpc, "-api-key", p.key, "-app", "chrom", "-role", "entry", "-name", "Email"}, &out, &errOut); err != nil {
		t.Fatalf("deskgrid a11y focus: %v %s", err, errOut.String())
	}
	if !strings.HasPrefix(out.String(), `entry "Email"`) || !strings.Contains(out.String(), entry.GetId()) {
		t.Errorf("deskgrid a11y focus printed %q", out.String())
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		e := deskgrid.FindAccessible(chrome(), "entry", "Email")
		if len(e) == 1 && slices.Contains(e[0].GetStates(), "focused") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the field is not focused after deskgrid a11y focus: %v", e)
		}
		time.Sleep(200 * time.Millisecond) // polled: the page moves its focus in its own time
	}
	// The keyboard then types into the focused field.
	if err := s.Type(ctx, "ann@example.com"); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		e := deskgrid.FindAccessible(chrome(), "entry", "Email")
		if len(e) == 1 && e[0].GetText() == "ann@example.com" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the focused field after typing: %v", e)
		}
		time.Sleep(200 * time.Millisecond) // polled: the page takes the keys in its own time
	}

	// Press the button by its action through the Go SDK: the page's script
	// runs and shows the field's value.
	name := "press"
	if !slices.Contains(button.GetActions(), name) {
		name = button.GetActions()[0]
	}
	start = time.Now()
	if _, err := s.ActOnAccessible(ctx, button.GetId(), deskgrid.DoAction(strings.ToUpper(name))); err != nil {
		t.Fatalf("%s the button: %v", name, err)
	}
	t.Logf("%s the button through gRPC: %v", name, time.Since(start))
	deadline = time.Now().Add(30 * time.Second)
	for findText(chrome(), "Pressed with ann@example.com") == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the press did not run the page's script:\n%s", dumpTree(chrome()))
		}
		time.Sleep(200 * time.Millisecond) // polled: the page updates its tree after the script
	}

	out.Reset()
	if err := run(ctx, []string{"a11y", id, "do", button.GetId(), "explode", "-addr", p.grpc, "-api-key", p.key}, &out, &errOut); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("deskgrid a11y do with an unknown action: %v", err)
	}

	// What a node cannot do is a precondition that says what it can.
	if code, body := act(js(map[string]any{"id": button.GetId(), "action": "explode"})); code != http.StatusBadRequest || !strings.Contains(body, "has no action") || !strings.Contains(body, name) {
		t.Errorf("an action the button lacks: %d %s", code, body)
	}
	// Bad ids and requests.
	for _, bad := range []string{
		`{"id": "` + entry.GetId() + `"}`,
		`{"id": "` + entry.GetId() + `", "focus": false}`,
		`{"id": "org.freedesktop.DBus:/org/freedesktop/DBus", "action": "click"}`,
		`{"id": "nonsense", "action": "click"}`,
		`{"action": "click"}`,
	} {
		if code, body := act(bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", bad, code, body)
		}
	}
	bus, _, _ := strings.Cut(strings.TrimPrefix(entry.GetId(), ":"), ":")
	for _, unknown := range []string{":" + bus + ":/org/a11y/atspi/accessible/no_such_object", ":1.9999:/org/a11y/atspi/accessible/1"} {
		if code, body := act(js(map[string]any{"id": unknown, "focus": true})); code != http.StatusNotFound {
			t.Errorf("unknown node %s: %d %s, want 404", unknown, code, body)
		}
	}
	if code, body, _ := p.do("POST", "/v1/sessions/no-such-session/accessibility:act", js(map[string]any{"id": entry.GetId(), "focus": true})); code != http.StatusNotFound {
		t.Errorf("unknown session: %d %s", code, body)
	}

	// One window's subtree: the frame at the top, the button below it.
	var frame *sandboxv1.AccessibleNode
	for _, w := range tree.GetApplications()[0].GetChildren() {
		if w.GetRole() == "frame" && strings.Contains(w.GetName(), "Form") {
			frame = w
		}
	}
	if frame == nil {
		t.Fatalf("no frame in Chromium's tree:\n%s", dumpTree(tree))
	}
	sub, err := s.AccessibilityTree(ctx, deskgrid.Root(frame.GetId()))
	if err != nil {
		t.Fatal(err)
	}
	if len(sub.GetApplications()) != 1 || sub.GetApplications()[0].GetId() != frame.GetId() || len(deskgrid.FindAccessible(sub, "push button", "Press me")) != 1 {
		t.Errorf("the frame's subtree:\n%s", dumpTree(sub))
	}
	if code, body, _ := p.do("GET", "/v1/sessions/"+id+"/accessibility?root=:1.9999:/org/a11y/atspi/accessible/1", ""); code != http.StatusNotFound {
		t.Errorf("the subtree of an unknown node: %d %s", code, body)
	}

	// Acts are input under the session's input lease, as display actions
	// are: while holder A (token 7) holds it, B (no token, an older one) is
	// refused with the same status and reason, acting or launching; A acts.
	lease := func(body string) {
		t.Helper()
		if code, b, _ := p.do("POST", "/v1/sessions/"+id+"/actions", body); code != http.StatusOK {
			t.Fatalf("display actions %s: %d %s", body, code, b)
		}
	}
	lease(`{"lease_token":"7","actions":[{"mouseMove":{"to":{"x":5,"y":5}}}]}`)
	for _, b := range []string{
		js(map[string]any{"id": entry.GetId(), "focus": true}),
		js(map[string]any{"id": entry.GetId(), "focus": true, "lease_token": 6}),
	} {
		if code, body := act(b); code != http.StatusBadRequest || !strings.Contains(body, "STALE_INPUT_LEASE") {
			t.Errorf("an act of another holder (%s) while the lease is held: %d %s", b, code, body)
		}
	}
	if code, body, _ := p.do("POST", "/v1/sessions/"+id+"/applications:launch", `{"application":"mousepad"}`); code != http.StatusBadRequest || !strings.Contains(string(body), "STALE_INPUT_LEASE") {
		t.Errorf("a launch of another holder while the lease is held: %d %s", code, body)
	}
	if _, code := p.execIn(id, "sh", "-c", "printf 'leased\\n' > leased.txt"); code != 0 {
		t.Fatalf("write leased.txt: exit %d", code)
	}
	if code, body, _ := p.do("POST", "/v1/sessions/"+id+"/applications:open", `{"target":"leased.txt"}`); code != http.StatusBadRequest || !strings.Contains(string(body), "STALE_INPUT_LEASE") {
		t.Errorf("an open of another holder while the lease is held: %d %s", code, body)
	}
	if code, body := act(js(map[string]any{"id": entry.GetId(), "focus": true, "lease_token": 7})); code != http.StatusOK {
		t.Errorf("the holder's act: %d %s", code, body)
	}
	// The Go SDK passes the token the same way: the holder's act goes
	// through, acting or launching; an act without it or a launch with an
	// older one is refused.
	if _, err := s.ActOnAccessibleWith(ctx, &sandboxv1.ActOnAccessibleRequest{Id: entry.GetId(), Operation: &sandboxv1.ActOnAccessibleRequest_Focus{Focus: true}, LeaseToken: 7}); err != nil {
		t.Errorf("the holder's act by the Go SDK: %v", err)
	}
	if _, err := s.ActOnAccessible(ctx, entry.GetId(), deskgrid.Focus()); !errors.Is(err, deskgrid.ErrFailedPrecondition) {
		t.Errorf("an act by the Go SDK without the token while the lease is held: %v", err)
	}
	if _, err := s.LaunchWith(ctx, &sandboxv1.LaunchApplicationRequest{Application: "mousepad", LeaseToken: 6}); !errors.Is(err, deskgrid.ErrFailedPrecondition) {
		t.Errorf("a launch by the Go SDK with a stale token while the lease is held: %v", err)
	}
	if l, err := s.LaunchWith(ctx, &sandboxv1.LaunchApplicationRequest{Application: "mousepad", LeaseToken: 7}); err != nil || l.Window == nil {
		t.Errorf("the holder's launch by the Go SDK: %+v %v", l, err)
	}
	lease(`{"lease_token":"7","release_lease":true}`)
	if code, body := act(js(map[string]any{"id": entry.GetId(), "focus": true})); code != http.StatusOK {
		t.Errorf("an act once the lease is given up: %d %s", code, body)
	}

	// Each act is in the session's history, the text it set with it.
	p.waitHistory(id, "trail.act_on_accessible.v1")
	var acts []string
	for _, e := range p.historyOf(id) {
		if e.Type == "trail.act_on_accessible.v1" {
			acts = append(acts, e.Data.Input)
		}
	}
	if !slices.ContainsFunc(acts, func(in string) bool {
		return strings.Contains(in, view.GetId()) && strings.Contains(in, "ann@example.com")
	}) {
		t.Errorf("the history's acts do not hold the text set: %q", acts)
	}
}
