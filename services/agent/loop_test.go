package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
)

func call(id, name, input string) *provider.ToolCall {
	return &provider.ToolCall{ID: id, Name: name, Input: json.RawMessage(input), Dialect: provider.DialectAnthropic}
}

func TestCreateRunValidates(t *testing.T) {
	h := newHarness(t, DefaultConfig(), fixed(&scripted{}))
	tests := []struct {
		name string
		req  *agentv1.CreateRunRequest
		want codes.Code
	}{
		{"no session", &agentv1.CreateRunRequest{Prompt: "hi"}, codes.InvalidArgument},
		{"bad session", &agentv1.CreateRunRequest{SessionId: "a.b", Prompt: "hi"}, codes.InvalidArgument},
		{"no prompt", &agentv1.CreateRunRequest{SessionId: "s-1"}, codes.InvalidArgument},
		{"negative steps", &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "hi", MaxSteps: -1}, codes.InvalidArgument},
		{"bad computer tool", &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "hi", Options: &agentv1.RunOptions{ComputerTool: "computer_1999"}}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.client.CreateRun(context.Background(), tt.req)
			if status.Code(err) != tt.want {
				t.Fatalf("CreateRun: %v, want %v", err, tt.want)
			}
		})
	}
	// An unknown provider is refused by the real constructor.
	h2 := newHarness(t, DefaultConfig(), nil)
	if _, err := h2.client.CreateRun(context.Background(), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "hi", Provider: "nobody"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown provider: %v", err)
	}
	// No key with the run and none configured: refused at once, saying
	// where keys come from; nothing is stored.
	for _, name := range []string{"anthropic", "openai", "gemini"} {
		_, err := h2.client.CreateRun(context.Background(), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "hi", Provider: name})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "-"+name+"-api-key") || !strings.Contains(err.Error(), strings.ToUpper(name)+"_API_KEY") {
			t.Fatalf("%s without a key: %v", name, err)
		}
	}
	if runs, err := h2.client.ListRuns(context.Background(), &agentv1.ListRunsRequest{SessionId: "s-1"}); err != nil || len(runs.GetRuns()) != 0 {
		t.Fatalf("refused runs were stored: %v %v", runs, err)
	}
}

// The model takes a screenshot, clicks, types, runs bash and edits a file;
// every effect reaches the display and sandbox, and the stream tells it all.
func TestLoopDrivesDisplayAndSandbox(t *testing.T) {
	p := &scripted{turns: []func(provider.Request) (*provider.Response, error){
		toolTurn(call("t1", "computer", `{"action":"screenshot"}`)),
		toolTurn(call("t2", "computer", `{"action":"left_click","coordinate":[100,200]}`)),
		toolTurn(call("t3", "computer", `{"action":"type","text":"hello"}`)),
		toolTurn(call("t4", "bash", `{"command":"echo hi"}`)),
		toolTurn(call("t5", "str_replace_based_edit_tool", `{"command":"create","path":"/home/user/a.txt","file_text":"one\ntwo\n"}`)),
		toolTurn(call("t6", "str_replace_based_edit_tool", `{"command":"str_replace","path":"/home/user/a.txt","old_str":"two","new_str":"three"}`)),
		toolTurn(call("t7", "str_replace_based_edit_tool", `{"command":"insert","path":"/home/user/a.txt","insert_line":0,"new_str":"zero"}`)),
		toolTurn(call("t8", "str_replace_based_edit_tool", `{"command":"undo_edit","path":"/home/user/a.txt"}`)),
		toolTurn(call("t9", "str_replace_based_edit_tool", `{"command":"view","path":"/home/user/a.txt"}`)),
	}}
	h := newHarness(t, DefaultConfig(), fixed(p))
	ctx := context.Background()
	resp, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "do things", Provider: "anthropic", Model: "m", ApiKey: "sk-secret-key-123"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetId()
	run := waitState(t, h.client, id, agentv1.RunState_RUN_STATE_SUCCEEDED, agentv1.RunState_RUN_STATE_FAILED)
	if run.GetState() != agentv1.RunState_RUN_STATE_SUCCEEDED {
		t.Fatalf("run %v: %s", run.GetState(), run.GetStateReason())
	}
	if run.GetSteps() != 10 || run.GetStopReason() != "end_turn" || run.GetUsage().GetInputTokens() != 900 {
		t.Fatalf("run = %v", run)
	}
	execs := h.node.shellCommands()
	h.node.mu.Lock()
	acts := h.node.actions
	tokens := h.node.tokens
	h.node.mu.Unlock()
	if len(acts) != 2 || acts[0].GetClick().GetAt().GetX() != 100 || acts[0].GetClick().GetAt().GetY() != 200 || acts[1].GetType().GetText() != "hello" {
		t.Fatalf("display actions = %v", acts)
	}
	for _, tok := range tokens {
		if tok <= 0 {
			t.Fatalf("input without a lease token: %v", tokens)
		}
	}
	if len(execs) != 1 || execs[0] != "echo hi" {
		t.Fatalf("execs = %v", execs)
	}
	if got := h.node.file("a.txt"); got != "one\nthree\n" {
		t.Fatalf("file = %q", got)
	}
	// The model saw the view of the file and the bash output.
	last := p.reqs[len(p.reqs)-1].Messages
	res := last[len(last)-1].Blocks[0].ToolResult
	if res == nil || res.Text != "     1\tone\n     2\tthree\n     3\t\n" {
		t.Fatalf("view result = %+v", res)
	}

	// The whole stream, from the start, then resumed from the middle.
	evs := collect(t, h.client, id, 0)
	var tools, shots, states int
	var usageIn int64
	for i, ev := range evs {
		if ev.GetSequence() != int64(i+1) || ev.GetRunId() != id {
			t.Fatalf("event %d = %v", i, ev)
		}
		usageIn += ev.GetUsage().GetInputTokens()
		switch {
		case ev.GetToolCall() != nil && ev.GetToolCall().GetFinished():
			tools++
		case ev.GetScreenshot() != nil:
			shots++
		case ev.GetState() != agentv1.RunState_RUN_STATE_UNSPECIFIED:
			states++
		}
	}
	if tools != 9 || shots != 3 || states != 3 {
		t.Fatalf("tools %d shots %d states %d in %d events", tools, shots, states, len(evs))
	}
	// Each turn's usage is in the stream once: the events add up to the run's total.
	if usageIn != run.GetUsage().GetInputTokens() {
		t.Fatalf("usage events add up to %d input tokens, the run says %d", usageIn, run.GetUsage().GetInputTokens())
	}
	tail := collect(t, h.client, id, 10)
	if len(tail) != len(evs)-10 || tail[0].GetSequence() != 11 {
		t.Fatalf("resume from 10: %d events starting %d", len(tail), tail[0].GetSequence())
	}
	assertNoKey(t, "sk-secret-key-123", run, evs)
}

func assertNoKey(t *testing.T, key string, msgs ...any) {
	t.Helper()
	for _, m := range msgs {
		b, _ := json.Marshal(m)
		if json.Valid(b) && contains(string(b), key) {
			t.Fatalf("api key leaked in %s", b)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) > 0 && len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func collect(t testing.TB, c agentv1.AgentServiceClient, id string, after int64) []*agentv1.RunEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.StreamRunEvents(ctx, &agentv1.StreamRunEventsRequest{RunId: id, AfterSequence: after})
	if err != nil {
		t.Fatal(err)
	}
	var out []*agentv1.RunEvent
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m.GetEvent())
	}
}

func TestCancelStopsProviderAndTool(t *testing.T) {
	for _, where := range []string{"provider", "tool"} {
		t.Run(where, func(t *testing.T) {
			p := &scripted{turns: []func(provider.Request) (*provider.Response, error){toolTurn(call("t1", "bash", `{"command":"sleep 100"}`))}}
			if where == "provider" {
				p.block = make(chan struct{})
			}
			h := newHarness(t, DefaultConfig(), fixed(p))
			if where == "tool" {
				h.node.block = make(chan struct{})
			}
			ctx := context.Background()
			resp, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetId()
			deadline := time.Now().Add(10 * time.Second)
			for {
				p.mu.Lock()
				n := len(p.reqs)
				p.mu.Unlock()
				e := len(h.node.shellCommands())
				if (where == "provider" && n > 0) || (where == "tool" && e > 0) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("run never reached the " + where)
				}
				time.Sleep(time.Millisecond)
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			c, err := h.client.CancelRun(cctx, &agentv1.CancelRunRequest{RunId: id})
			if err != nil {
				t.Fatal(err)
			}
			if c.GetRun().GetState() != agentv1.RunState_RUN_STATE_CANCELLED {
				t.Fatalf("after cancel: %v", c.GetRun())
			}
		})
	}
}

func TestApprovalPausesUntilDecided(t *testing.T) {
	p := &scripted{turns: []func(provider.Request) (*provider.Response, error){
		toolTurn(call("t1", "bash", `{"command":"rm -rf /tmp/x"}`)),
		toolTurn(call("t2", "bash", `{"command":"ls"}`)),
		toolTurn(&provider.ToolCall{ID: "t3", Name: "computer", Input: json.RawMessage(`[{"type":"click","x":1,"y":2,"button":"left"}]`), Dialect: provider.DialectOpenAI, SafetyChecks: []provider.SafetyCheck{{ID: "sc1", Code: "malicious_instructions", Message: "careful"}}}),
	}}
	h := newHarness(t, DefaultConfig(), fixed(p))
	ctx := context.Background()
	resp, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", Options: &agentv1.RunOptions{ApprovalTools: []string{"bash"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetId()
	r := waitState(t, h.client, id, agentv1.RunState_RUN_STATE_WAITING_APPROVAL)
	if r.GetPendingToolCall().GetId() != "t1" {
		t.Fatalf("pending = %v", r.GetPendingToolCall())
	}
	if _, err := h.client.ApproveStep(ctx, &agentv1.ApproveStepRequest{RunId: id, ToolCallId: "other"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("approve wrong call: %v", err)
	}
	if _, err := h.client.RejectStep(ctx, &agentv1.RejectStepRequest{RunId: id, ToolCallId: "t1", Reason: "too risky"}); err != nil {
		t.Fatal(err)
	}
	r = waitState(t, h.client, id, agentv1.RunState_RUN_STATE_WAITING_APPROVAL)
	for r.GetPendingToolCall().GetId() != "t2" {
		r = waitState(t, h.client, id, agentv1.RunState_RUN_STATE_WAITING_APPROVAL)
	}
	if _, err := h.client.ApproveStep(ctx, &agentv1.ApproveStepRequest{RunId: id}); err != nil {
		t.Fatal(err)
	}
	// The OpenAI safety check pauses too; approving acknowledges it.
	for r.GetPendingToolCall().GetId() != "t3" {
		r = waitState(t, h.client, id, agentv1.RunState_RUN_STATE_WAITING_APPROVAL)
	}
	if _, err := h.client.ApproveStep(ctx, &agentv1.ApproveStepRequest{RunId: id}); err != nil {
		t.Fatal(err)
	}
	waitState(t, h.client, id, agentv1.RunState_RUN_STATE_SUCCEEDED)
	if execs := len(h.node.shellCommands()); execs != 1 {
		t.Fatalf("%d commands ran, want only the approved one", execs)
	}
	msgs := p.reqs[1].Messages
	if tr := msgs[len(msgs)-1].Blocks[0].ToolResult; !tr.IsError || !contains(tr.Text, "too risky") {
		t.Fatalf("rejected result = %+v", tr)
	}
	msgs = p.reqs[3].Messages
	if tr := msgs[len(msgs)-1].Blocks[0].ToolResult; len(tr.Acknowledged) != 1 || tr.Acknowledged[0].ID != "sc1" {
		t.Fatalf("safety check not acknowledged: %+v", tr)
	}
}

func TestApprovalTimesOut(t *testing.T) {
	p := &scripted{turns: []func(provider.Request) (*provider.Response, error){toolTurn(call("t1", "bash", `{"command":"ls"}`))}}
	h := newHarness(t, DefaultConfig(), fixed(p))
	resp, err := h.client.CreateRun(context.Background(), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", Options: &agentv1.RunOptions{ApprovalTools: []string{"bash"}, ApprovalTimeout: durationMs(50)}})
	if err != nil {
		t.Fatal(err)
	}
	r := waitState(t, h.client, resp.GetRun().GetId(), agentv1.RunState_RUN_STATE_FAILED)
	if !contains(r.GetStateReason(), "approval timed out") {
		t.Fatalf("reason = %q", r.GetStateReason())
	}
}

func TestRetriesTransientErrorsAndFailsOnOthers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RetryBackoff = time.Millisecond
	transient := &provider.Error{Provider: "x", StatusCode: 529, Transient: true, Msg: "overloaded"}
	p := &scripted{turns: []func(provider.Request) (*provider.Response, error){
		func(provider.Request) (*provider.Response, error) { return nil, transient },
		func(provider.Request) (*provider.Response, error) { return nil, transient },
	}}
	h := newHarness(t, cfg, fixed(p))
	resp, err := h.client.CreateRun(context.Background(), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, h.client, resp.GetRun().GetId(), agentv1.RunState_RUN_STATE_SUCCEEDED)

	bad := &scripted{turns: []func(provider.Request) (*provider.Response, error){
		func(provider.Request) (*provider.Response, error) {
			return nil, &provider.Error{Provider: "x", StatusCode: 401, Msg: "invalid x-api-key"}
		},
	}}
	h2 := newHarness(t, cfg, fixed(bad))
	resp, err = h2.client.CreateRun(context.Background(), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	r := waitState(t, h2.client, resp.GetRun().GetId(), agentv1.RunState_RUN_STATE_FAILED)
	if !contains(r.GetStateReason(), "HTTP 401") || len(bad.reqs) != 1 {
		t.Fatalf("reason %q after %d attempts", r.GetStateReason(), len(bad.reqs))
	}
}

func TestMaxStepsBudgetAndScreenshotsKept(t *testing.T) {
	var turns []func(provider.Request) (*provider.Response, error)
	for range 6 {
		turns = append(turns, toolTurn(call("s", "computer", `{"action":"screenshot"}`)))
	}
	p := &scripted{turns: turns}
	h := newHarness(t, DefaultConfig(), fixed(p))
	resp, err := h.client.CreateRun(context.Background(), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", MaxSteps: 5, Options: &agentv1.RunOptions{KeepScreenshots: 2}})
	if err != nil {
		t.Fatal(err)
	}
	r := waitState(t, h.client, resp.GetRun().GetId(), agentv1.RunState_RUN_STATE_FAILED)
	if !contains(r.GetStateReason(), "max_steps") || r.GetSteps() != 5 {
		t.Fatalf("run = %v", r)
	}
	last := p.reqs[len(p.reqs)-1]
	var live, elided int
	for _, m := range last.Messages {
		for _, b := range m.Blocks {
			if b.ToolResult != nil && b.ToolResult.Image != nil {
				if b.ToolResult.Image.Elided {
					elided++
				} else {
					live++
				}
			}
		}
	}
	if live != 2 || elided != 2 {
		t.Fatalf("screenshots in context: %d live, %d elided", live, elided)
	}

	p2 := &scripted{turns: turns}
	h2 := newHarness(t, DefaultConfig(), fixed(p2))
	resp, err = h2.client.CreateRun(context.Background(), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", Options: &agentv1.RunOptions{TokenBudget: 250}})
	if err != nil {
		t.Fatal(err)
	}
	r = waitState(t, h2.client, resp.GetRun().GetId(), agentv1.RunState_RUN_STATE_FAILED)
	if !contains(r.GetStateReason(), "token budget") || r.GetSteps() != 3 {
		t.Fatalf("run = %v", r)
	}
}

func TestSendMessageContinuesRun(t *testing.T) {
	p := &scripted{}
	h := newHarness(t, DefaultConfig(), fixed(p))
	ctx := context.Background()
	resp, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "first"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetId()
	waitState(t, h.client, id, agentv1.RunState_RUN_STATE_SUCCEEDED)
	before := len(collect(t, h.client, id, 0))
	if _, err := h.client.SendMessage(ctx, &agentv1.SendMessageRequest{RunId: id, Text: "second"}); err != nil {
		t.Fatal(err)
	}
	waitState(t, h.client, id, agentv1.RunState_RUN_STATE_SUCCEEDED)
	for {
		p.mu.Lock()
		n := len(p.reqs)
		p.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	msgs := p.reqs[1].Messages
	if len(msgs) != 3 || msgs[2].Text() != "second" || msgs[0].Text() != "first" {
		t.Fatalf("conversation = %+v", msgs)
	}
	after := collect(t, h.client, id, int64(before))
	if len(after) == 0 || after[0].GetSequence() != int64(before+1) {
		t.Fatalf("continued events = %v", after)
	}
}

func TestTwoRunsOnOneSessionTakeTurns(t *testing.T) {
	mk := func() *scripted {
		return &scripted{turns: []func(provider.Request) (*provider.Response, error){
			toolTurn(call("c", "computer", `{"action":"left_click","coordinate":[1,1]}`)),
			toolTurn(call("c", "computer", `{"action":"left_click","coordinate":[2,2]}`)),
		}}
	}
	a, b := mk(), mk()
	a.block = make(chan struct{})
	n := 0
	h := newHarness(t, DefaultConfig(), func(context.Context, provider.Config) (provider.Provider, error) {
		n++
		if n == 1 {
			return a, nil
		}
		return b, nil
	})
	ctx := context.Background()
	ra, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "a"})
	if err != nil {
		t.Fatal(err)
	}
	// a holds the lease (its first turn is blocked); b must wait for it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		started := len(a.reqs) > 0
		a.mu.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("run a never started")
		}
		time.Sleep(time.Millisecond)
	}
	rb, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "b"})
	if err != nil {
		t.Fatal(err)
	}
	r := waitState(t, h.client, rb.GetRun().GetId(), agentv1.RunState_RUN_STATE_RUNNING)
	b.mu.Lock()
	if len(b.reqs) != 0 {
		t.Fatalf("run b asked its model while a held the lease")
	}
	b.mu.Unlock()
	_ = r
	close(a.block)
	waitState(t, h.client, ra.GetRun().GetId(), agentv1.RunState_RUN_STATE_SUCCEEDED)
	waitState(t, h.client, rb.GetRun().GetId(), agentv1.RunState_RUN_STATE_SUCCEEDED)
	// Each run gives its lease up at the display as it ends, which may come
	// just after its record says SUCCEEDED.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		h.node.mu.Lock()
		n := len(h.node.released)
		h.node.mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
	}
	h.node.mu.Lock()
	defer h.node.mu.Unlock()
	// a's two clicks with token 1, then b's two with token 2.
	want := []int64{1, 1, 2, 2}
	if len(h.node.tokens) != 4 {
		t.Fatalf("tokens = %v", h.node.tokens)
	}
	// Each run gave its lease up at the display when it ended, so input
	// without a token is accepted again.
	if len(h.node.released) != 2 || h.node.released[0] != 1 || h.node.released[1] != 2 {
		t.Fatalf("leases released at the display = %v, want [1 2]", h.node.released)
	}
	for i := range want {
		if h.node.tokens[i] != want[i] {
			t.Fatalf("tokens = %v, want %v", h.node.tokens, want)
		}
	}
	if x := h.node.actions[2].GetClick().GetAt().GetX(); x != 1 {
		t.Fatalf("b's first click at x=%d", x)
	}
	_ = displayv1.MouseButton_MOUSE_BUTTON_LEFT
}

// A model that wants a smaller screen gets it from the display's scale_to:
// screenshots arrive at its size and its coordinates map back to the
// screen; zoom is the display's own. The bash tool uses the persistent
// shell and restarts it on request.
func TestScaledScreenAndPersistentShell(t *testing.T) {
	p := &scripted{turns: []func(provider.Request) (*provider.Response, error){
		toolTurn(call("t1", "computer", `{"action":"screenshot"}`)),
		toolTurn(call("t2", "computer", `{"action":"left_click","coordinate":[512,320]}`)),
		toolTurn(call("t3", "computer", `{"action":"zoom","region":[0,0,512,320]}`)),
		toolTurn(call("t4", "bash", `{"restart":true}`)),
		toolTurn(call("t5", "bash", `{"command":"false"}`)),
	}}
	h := newHarness(t, DefaultConfig(), fixed(p))
	resp, err := h.client.CreateRun(context.Background(), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", Options: &agentv1.RunOptions{ComputerTool: "computer_20251124", ScreenWidth: 1024, ScreenHeight: 640}})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, h.client, resp.GetRun().GetId(), agentv1.RunState_RUN_STATE_SUCCEEDED)
	h.node.mu.Lock()
	scales, acts, restarts := h.node.scales, h.node.actions, h.node.restart
	h.node.mu.Unlock()
	for _, sc := range scales {
		if sc.GetWidth() != 1024 || sc.GetHeight() != 640 {
			t.Fatalf("scale_to = %v", scales)
		}
	}
	if len(acts) != 2 || acts[0].GetClick().GetAt().GetX() != 640 || acts[0].GetClick().GetAt().GetY() != 400 {
		t.Fatalf("actions = %v", acts)
	}
	if z := acts[1].GetZoom(); z.GetRegion().GetWidth() != 512 || z.GetSize().GetWidth() != 1024 {
		t.Fatalf("zoom = %v", acts[1])
	}
	if restarts != 1 {
		t.Fatalf("%d restarts", restarts)
	}
	result := func(i int) *provider.ToolResult {
		msgs := p.reqs[i].Messages
		return msgs[len(msgs)-1].Blocks[0].ToolResult
	}
	if img := result(1).Image; img == nil || !bytes.Equal(img.Data, h.node.shots[[2]int32{1024, 640}]) {
		t.Fatalf("the screenshot is not the display's scaled one")
	}
	if r := result(4); r.Text != "tool has been restarted." {
		t.Fatalf("restart result %+v", r)
	}
	if r := result(5); !r.IsError || !contains(r.Text, "exit code 1") {
		t.Fatalf("failed command result %+v", r)
	}
}
