package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/agent/internal/runlog"
	"github.com/deskgrid/deskgrid/services/agent/internal/tools"
	"github.com/deskgrid/deskgrid/services/agent/lease"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

// run is a run this process is executing or has recently executed.
type run struct {
	id   string
	svc  *Service
	prov provider.Provider
	log  *runlog.Log
	exec *tools.Executor

	mu       sync.Mutex
	rec      *agentv1.Run
	conv     []provider.Message
	inbox    []string
	cancel   context.CancelCauseFunc
	done     chan struct{}
	decision chan decision
	lease    lease.Lease
	// recording is the id of the run's recording while it runs.
	recording string
}

type decision struct {
	callID string
	ok     bool
	reason string
}

var errApprovalTimeout = errors.New("approval timed out")

func terminal(st agentv1.RunState) bool {
	return st == agentv1.RunState_RUN_STATE_SUCCEEDED || st == agentv1.RunState_RUN_STATE_FAILED || st == agentv1.RunState_RUN_STATE_CANCELLED
}

// snapshot returns a copy of the run record.
func (r *run) snapshot() *agentv1.Run {
	r.mu.Lock()
	rec := proto.Clone(r.rec).(*agentv1.Run)
	r.mu.Unlock()
	rec.EventSequence = r.log.Sequence()
	return rec
}

// setState records a transition, stores it and publishes it.
func (r *run) setState(ctx context.Context, st agentv1.RunState, reason string) {
	if terminal(st) {
		// The video is whole by the time a client sees the run end.
		r.stopRecording(ctx)
	}
	r.mu.Lock()
	r.rec.State = st
	r.rec.StateReason = reason
	if st != agentv1.RunState_RUN_STATE_WAITING_APPROVAL {
		r.rec.PendingToolCall = nil
	}
	r.rec.UpdateTime = timestamppb.Now()
	rec := proto.Clone(r.rec).(*agentv1.Run)
	r.mu.Unlock()
	r.log.Append(&agentv1.RunEvent{Event: &agentv1.RunEvent_State{State: st}, Reason: reason})
	r.save(ctx, rec)
}

func (r *run) save(ctx context.Context, rec *agentv1.Run) {
	// The record outlives a cancelled run context.
	ctx = context.WithoutCancel(ctx)
	rec.EventSequence = r.log.Sequence()
	if err := r.svc.store.Update(ctx, rec); err != nil {
		r.svc.logger.Warn("store run", "run", r.id, "err", err)
	}
}

func (r *run) saveConversation(ctx context.Context) {
	r.mu.Lock()
	conv := make([]provider.Message, len(r.conv))
	for i, m := range r.conv {
		conv[i] = provider.Message{Role: m.Role, Blocks: slices.Clone(m.Blocks)}
		for j, b := range conv[i].Blocks {
			// Pixels are not kept: a continued run sees its old screenshots elided.
			if b.Image != nil {
				b.Image = &provider.Image{MediaType: b.Image.MediaType, Elided: true}
			}
			if b.ToolResult != nil && b.ToolResult.Image != nil {
				tr := *b.ToolResult
				tr.Image = &provider.Image{MediaType: tr.Image.MediaType, Elided: true}
				tr.Tree = ""
				b.ToolResult = &tr
			}
			conv[i].Blocks[j] = b
		}
	}
	r.mu.Unlock()
	data, err := json.Marshal(conv)
	if err == nil {
		err = r.svc.store.SaveConversation(context.WithoutCancel(ctx), r.id, data)
	}
	if err != nil {
		r.svc.logger.Warn("store run conversation", "run", r.id, "err", err)
	}
}

// start runs the loop in the background.
func (r *run) start() {
	ctx, cancel := context.WithCancelCause(r.svc.ctx)
	r.mu.Lock()
	r.cancel = cancel
	r.done = make(chan struct{})
	done := r.done
	r.mu.Unlock()
	// A run in progress keeps its session from being stopped as idle.
	release := func() {}
	if a := r.svc.deps.Activity; a != nil {
		release = a.Hold(r.rec.GetSessionId())
	}
	r.svc.wg.Add(1)
	go func() {
		defer r.svc.wg.Done()
		defer close(done)
		defer release()
		defer cancel(nil)
		r.execute(ctx)
		r.log.Finish()
		r.svc.forgetLater(r)
	}()
}

// execute is the agent loop.
func (r *run) execute(ctx context.Context) {
	s := r.svc
	opts := r.rec.GetOptions()
	fail := func(err error) {
		var ended *sessionEndedError
		switch {
		case errors.As(context.Cause(ctx), &ended):
			r.setState(ctx, agentv1.RunState_RUN_STATE_FAILED, ended.Error())
		case ctx.Err() != nil:
			reason := "cancelled"
			if s.ctx.Err() != nil {
				reason = "service shutting down"
			}
			r.setState(ctx, agentv1.RunState_RUN_STATE_CANCELLED, reason)
		default:
			r.setState(ctx, agentv1.RunState_RUN_STATE_FAILED, err.Error())
		}
	}
	// A recorded run is RUNNING with its recording_id set.
	if opts.GetRecord() {
		if err := r.startRecording(ctx); err != nil {
			fail(err)
			return
		}
	}
	r.setState(ctx, agentv1.RunState_RUN_STATE_RUNNING, "")
	if !opts.GetSkipInputLease() {
		stopRenew, err := r.takeLease(ctx)
		if err != nil {
			fail(err)
			return
		}
		defer stopRenew()
	}
	w, h, err := r.exec.DisplaySize(ctx)
	if err != nil {
		fail(fmt.Errorf("display of session %s: %w", r.rec.GetSessionId(), err))
		return
	}
	mw, mh := int(opts.GetScreenWidth()), int(opts.GetScreenHeight())
	if mw <= 0 || mh <= 0 {
		mw, mh = r.prov.DefaultScreen(w, h)
	}
	r.exec.Scale.ModelW, r.exec.Scale.ModelH = mw, mh
	toolset := provider.Tools{ScreenWidth: mw, ScreenHeight: mh, ComputerVersion: opts.GetComputerTool(), Bash: true, Editor: true}
	maxSteps := int(r.rec.GetMaxSteps())
	if maxSteps <= 0 {
		maxSteps = s.cfg.MaxSteps
	}
	keep := int(opts.GetKeepScreenshots())
	if keep <= 0 {
		keep = s.cfg.KeepScreenshots
	}
	maxOut := int(opts.GetMaxOutputTokens())
	if maxOut <= 0 {
		maxOut = s.cfg.MaxOutputTokens
	}
	for {
		r.mu.Lock()
		steps := int(r.rec.GetSteps())
		r.mu.Unlock()
		if steps >= maxSteps {
			r.setState(ctx, agentv1.RunState_RUN_STATE_FAILED, fmt.Sprintf("reached max_steps (%d)", maxSteps))
			return
		}
		r.mu.Lock()
		elideScreenshots(r.conv, keep)
		req := provider.Request{Model: r.rec.GetModel(), System: opts.GetSystemPrompt(), Messages: slices.Clone(r.conv), Tools: toolset, MaxTokens: maxOut, ThinkingBudget: int(opts.GetThinkingBudget())}
		r.mu.Unlock()
		resp, err := r.turn(ctx, req, steps+1)
		if err != nil {
			fail(err)
			return
		}
		r.mu.Lock()
		r.rec.Steps++
		r.rec.StopReason = resp.StopReason
		u := r.rec.GetUsage()
		if u == nil {
			u = &agentv1.Usage{}
			r.rec.Usage = u
		}
		u.InputTokens += resp.Usage.InputTokens
		u.OutputTokens += resp.Usage.OutputTokens
		u.CacheReadTokens += resp.Usage.CacheReadTokens
		u.CacheWriteTokens += resp.Usage.CacheWriteTokens
		total := u.InputTokens + u.OutputTokens
		// The event carries this turn's tokens as the provider reported them,
		// so a reader adding up events counts each once; the record holds
		// the run's total.
		usage := &agentv1.Usage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens, CacheReadTokens: resp.Usage.CacheReadTokens, CacheWriteTokens: resp.Usage.CacheWriteTokens}
		r.conv = append(r.conv, resp.Message)
		step := r.rec.Steps
		rec := proto.Clone(r.rec).(*agentv1.Run)
		r.mu.Unlock()
		r.log.Append(&agentv1.RunEvent{Event: &agentv1.RunEvent_Usage{Usage: usage}, Step: step, Reason: resp.StopReason})
		r.save(ctx, rec)
		if b := opts.GetTokenBudget(); b > 0 && total > b {
			r.saveConversation(ctx)
			r.setState(ctx, agentv1.RunState_RUN_STATE_FAILED, fmt.Sprintf("token budget exceeded: %d of %d tokens used", total, b))
			return
		}
		calls := resp.Message.ToolCalls()
		var results []provider.Block
		for _, call := range calls {
			res, err := r.runTool(ctx, call, step)
			if err != nil {
				r.saveConversation(ctx)
				fail(err)
				return
			}
			results = append(results, provider.Block{Kind: provider.BlockToolResult, ToolResult: res})
		}
		r.mu.Lock()
		for _, m := range r.inbox {
			results = append(results, provider.Block{Kind: provider.BlockText, Text: m})
		}
		r.inbox = nil
		if len(results) > 0 {
			r.conv = append(r.conv, provider.Message{Role: provider.RoleUser, Blocks: results})
		}
		r.mu.Unlock()
		r.saveConversation(ctx)
		if ctx.Err() != nil {
			// Cancelled, or its session ended, while the model answered.
			fail(ctx.Err())
			return
		}
		if len(results) == 0 {
			r.setState(ctx, agentv1.RunState_RUN_STATE_SUCCEEDED, resp.StopReason)
			return
		}
	}
}

// takeLease waits for the session's input lease and keeps it renewed until
// the returned func is called; losing it cancels nothing by itself, the
// display refuses the stale token and the run fails on its next action.
func (r *run) takeLease(ctx context.Context) (func(), error) {
	s := r.svc
	l, err := s.leases.Acquire(ctx, r.rec.GetSessionId(), r.id, s.cfg.InputLeaseTTL)
	if err != nil {
		return nil, fmt.Errorf("input lease: %w", err)
	}
	r.mu.Lock()
	r.lease = l
	r.mu.Unlock()
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.InputLeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				if _, err := s.leases.Renew(rctx, l.SessionID, l.ID, s.cfg.InputLeaseTTL); err != nil {
					s.logger.Warn("input lease lost", "run", r.id, "err", err)
					return
				}
			}
		}
	}()
	return func() {
		stop()
		<-done
		_ = s.leases.Release(context.WithoutCancel(ctx), l.SessionID, l.ID)
		s.releaseAtDisplay(context.WithoutCancel(ctx), l.SessionID, l.Token)
	}, nil
}

// turn asks the model once, retrying transient errors with backoff.
func (r *run) turn(ctx context.Context, req provider.Request, step int) (*provider.Response, error) {
	s := r.svc
	onDelta := func(d provider.Delta) {
		ev := &agentv1.RunEvent{Step: int32(step)}
		if d.Kind == provider.DeltaThinking {
			ev.Event = &agentv1.RunEvent_ThinkingDelta{ThinkingDelta: d.Text}
		} else {
			ev.Event = &agentv1.RunEvent_TextDelta{TextDelta: d.Text}
		}
		r.log.Append(ev)
	}
	for attempt := 0; ; attempt++ {
		resp, err := r.callProvider(ctx, req, onDelta)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !provider.IsTransient(err) || attempt >= s.cfg.Retries {
			return nil, fmt.Errorf("model turn %d: %w", step, err)
		}
		d := s.cfg.RetryBackoff << attempt
		d = min(d, 30*time.Second)
		d = d/2 + rand.N(d/2+1)
		s.logger.Info("provider error, retrying", "run", r.id, "attempt", attempt+1, "in", d, "err", err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// runTool executes one tool call, after approval when the run asks for it.
func (r *run) runTool(ctx context.Context, call *provider.ToolCall, step int32) (*provider.ToolResult, error) {
	opts := r.rec.GetOptions()
	tc := &agentv1.ToolCall{Id: call.ID, Tool: call.Name, InputJson: string(call.Input)}
	for _, sc := range call.SafetyChecks {
		tc.SafetyChecks = append(tc.SafetyChecks, sc.Code+": "+sc.Message)
	}
	r.log.Append(&agentv1.RunEvent{Event: &agentv1.RunEvent_ToolCall{ToolCall: proto.Clone(tc).(*agentv1.ToolCall)}, Step: step})
	res := &provider.ToolResult{CallID: call.ID, Name: call.Name}
	needs := slices.Contains(opts.GetApprovalTools(), call.Name) || (len(call.SafetyChecks) > 0 && !opts.GetAutoAcknowledgeSafetyChecks())
	if needs {
		d, err := r.awaitApproval(ctx, tc)
		if err != nil {
			return nil, err
		}
		if !d.ok {
			metrics.ToolCalled(ctx, r.prov.Name(), call.Name, metrics.ToolRejected)
			res.IsError = true
			res.Text = "The user rejected this action."
			if d.reason != "" {
				res.Text += " Reason: " + d.reason
			}
			r.finishTool(tc, res, step)
			return res, nil
		}
	}
	res.Acknowledged = call.SafetyChecks
	out, err := r.exec.Run(ctx, call)
	if err != nil {
		metrics.ToolCalled(ctx, r.prov.Name(), call.Name, metrics.ToolFailed)
		return nil, fmt.Errorf("tool %s: %w", call.Name, err)
	}
	res.Text, res.IsError = out.Text, out.IsError
	if out.IsError {
		metrics.ToolCalled(ctx, r.prov.Name(), call.Name, metrics.ToolError)
	} else {
		metrics.ToolCalled(ctx, r.prov.Name(), call.Name, metrics.ToolOK)
	}
	if out.Image != nil {
		res.Image, res.Tree = out.Image, out.Tree
		// The image goes to the event stream (the history keeps it); the
		// event in memory only refers to it.
		r.log.AppendData(&agentv1.RunEvent{Event: &agentv1.RunEvent_Screenshot{Screenshot: &agentv1.ScreenshotRef{
			ToolCallId: call.ID, ContentType: out.Image.MediaType, Width: int32(out.Width), Height: int32(out.Height), SizeBytes: int64(len(out.Image.Data)),
		}}, Step: step}, out.Image.Data)
	}
	r.finishTool(tc, res, step)
	return res, nil
}

func (r *run) finishTool(tc *agentv1.ToolCall, res *provider.ToolResult, step int32) {
	done := proto.Clone(tc).(*agentv1.ToolCall)
	done.Output, done.IsError, done.Finished = res.Text, res.IsError, true
	if res.Image != nil && done.Output == "" {
		done.Output = "[screenshot]"
	}
	r.log.Append(&agentv1.RunEvent{Event: &agentv1.RunEvent_ToolCall{ToolCall: done}, Step: step})
}

func (r *run) awaitApproval(ctx context.Context, tc *agentv1.ToolCall) (decision, error) {
	s := r.svc
	timeout := r.rec.GetOptions().GetApprovalTimeout().AsDuration()
	if timeout <= 0 {
		timeout = s.cfg.ApprovalTimeout
	}
	r.mu.Lock()
	r.rec.PendingToolCall = proto.Clone(tc).(*agentv1.ToolCall)
	r.decision = make(chan decision, 1)
	ch := r.decision
	r.mu.Unlock()
	r.setState(ctx, agentv1.RunState_RUN_STATE_WAITING_APPROVAL, "tool call "+tc.GetId()+" ("+tc.GetTool()+") waits for approval")
	t := time.NewTimer(timeout)
	defer t.Stop()
	defer func() {
		r.mu.Lock()
		r.decision = nil
		r.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return decision{}, ctx.Err()
	case <-t.C:
		return decision{}, fmt.Errorf("tool call %s: %w after %s", tc.GetId(), errApprovalTimeout, timeout)
	case d := <-ch:
		r.setState(ctx, agentv1.RunState_RUN_STATE_RUNNING, "")
		return d, nil
	}
}

// elideScreenshots drops the pixels of all but the keep newest screenshots,
// and the accessibility trees beside them.
func elideScreenshots(conv []provider.Message, keep int) {
	seen := 0
	for i := len(conv) - 1; i >= 0; i-- {
		for j := len(conv[i].Blocks) - 1; j >= 0; j-- {
			b := &conv[i].Blocks[j]
			var img **provider.Image
			switch {
			case b.ToolResult != nil && b.ToolResult.Image != nil:
				img = &b.ToolResult.Image
			case b.Image != nil:
				img = &b.Image
			default:
				continue
			}
			if (*img).Elided {
				continue
			}
			seen++
			if seen > keep {
				// Copy-on-write: the block may be shared with a request in flight.
				if b.ToolResult != nil {
					tr := *b.ToolResult
					tr.Image = &provider.Image{MediaType: (*img).MediaType, Elided: true}
					// The tree beside it goes with it.
					tr.Tree = ""
					b.ToolResult = &tr
				} else {
					b.Image = &provider.Image{MediaType: (*img).MediaType, Elided: true}
				}
			}
		}
	}
}
