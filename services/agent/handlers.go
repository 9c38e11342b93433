package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/agent/internal/runlog"
	"github.com/deskgrid/deskgrid/services/agent/internal/tools"
	"github.com/deskgrid/deskgrid/services/agent/store"
	"github.com/deskgrid/deskgrid/services/platform/auth"
)

// sink is where a run's events are made durable: JetStream directly
// (asynchronous, batched) when the service has it, else the publisher.
func (s *Service) sink(rec *agentv1.Run) runlog.Sink {
	info := runlog.RunInfo{Tenant: rec.GetTenant(), SessionID: rec.GetSessionId(), Provider: rec.GetProvider(), Model: rec.GetModel()}
	switch {
	case s.asyncJS != nil:
		return &runlog.JetStreamSink{JS: s.asyncJS, Info: info}
	case s.deps.Publisher != nil:
		return runlog.PublisherSink{Publisher: s.deps.Publisher, Info: info}
	default:
		return nil
	}
}

// CreateRun starts an agent loop on a session.
func (s *Service) CreateRun(ctx context.Context, req *agentv1.CreateRunRequest) (*agentv1.CreateRunResponse, error) {
	rec, err := s.createRun(ctx, req)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &agentv1.CreateRunResponse{Run: rec}, nil
}

func (s *Service) createRun(ctx context.Context, req *agentv1.CreateRunRequest) (*agentv1.Run, error) {
	if req.GetSessionId() == "" || strings.ContainsAny(req.GetSessionId(), ".*> ") {
		return nil, invalid("session_id is required and may not contain '.', '*', '>' or spaces")
	}
	if req.GetPrompt() == "" {
		return nil, invalid("prompt is required")
	}
	if req.GetMaxSteps() < 0 {
		return nil, invalid("max_steps must not be negative")
	}
	if t := req.GetOptions().GetComputerTool(); t != "" && t != provider.Computer20250124 && t != provider.Computer20251124 {
		return nil, invalid("options.computer_tool must be %s or %s", provider.Computer20250124, provider.Computer20251124)
	}
	if st := req.GetOptions().GetSettle(); st != nil {
		for name, d := range map[string]*durationpb.Duration{"change_timeout": st.GetChangeTimeout(), "quiet": st.GetQuiet(), "timeout": st.GetTimeout()} {
			if d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) {
				return nil, invalid("options.settle.%s must be a non-negative duration", name)
			}
		}
	}
	if s.deps.Display == nil || s.deps.Sandbox == nil {
		return nil, errNoNode
	}
	tenant, err := s.tenancy.Owner(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.checkSession(ctx, req.GetSessionId(), true); err != nil {
		return nil, err
	}
	name := req.GetProvider()
	if name == "" {
		name = s.cfg.DefaultProvider
	}
	if name == "google" {
		name = "gemini"
	}
	model := req.GetModel()
	if model == "" {
		model = s.cfg.DefaultModels[name]
	}
	prov, err := s.newProvider(ctx, name, req.GetApiKey(), req.GetBaseUrl())
	if err != nil {
		return nil, err
	}
	if model == "" {
		return nil, invalid("model is required for provider %s", name)
	}
	maxSteps := req.GetMaxSteps()
	if maxSteps == 0 {
		maxSteps = int32(s.cfg.MaxSteps)
	}
	now := timestamppb.Now()
	opts := req.GetOptions()
	if opts == nil {
		opts = &agentv1.RunOptions{}
	}
	rec := &agentv1.Run{
		Id: newRunID(), SessionId: req.GetSessionId(), Tenant: tenant, State: agentv1.RunState_RUN_STATE_QUEUED,
		Provider: name, Model: model, Prompt: req.GetPrompt(), MaxSteps: maxSteps,
		CreateTime: now, UpdateTime: now, Options: opts, Usage: &agentv1.Usage{},
	}
	access := store.Access{BaseURL: req.GetBaseUrl(), OwnKey: req.GetApiKey() != ""}
	if access.OwnKey && s.sealer != nil {
		access.SealedKey = s.sealer.Seal([]byte(req.GetApiKey()), []byte(rec.GetId()))
	}
	if err := s.store.Create(ctx, rec, access); err != nil {
		return nil, storeErr("store run", err)
	}
	r := s.newRun(rec, prov, 0)
	r.conv = []provider.Message{provider.UserText(req.GetPrompt())}
	r.log.Append(&agentv1.RunEvent{Event: &agentv1.RunEvent_State{State: agentv1.RunState_RUN_STATE_QUEUED}})
	r.log.Append(&agentv1.RunEvent{Event: &agentv1.RunEvent_UserMessage{UserMessage: req.GetPrompt()}})
	if err := s.admit(r); err != nil {
		return nil, err
	}
	r.start()
	return rec, nil
}

// checkSession asks the session service, as the caller, whether the session
// exists and is the caller's, and with running whether it is RUNNING (a run
// cannot work on a desktop that is not). An anonymous caller sees no
// session.
func (s *Service) checkSession(ctx context.Context, id string, running bool) error {
	if s.tenancy.Caller(ctx).Kind == auth.Anonymous {
		return sessionNotFound(id)
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	}
	resp, err := s.deps.Sessions.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: id})
	switch status.Code(err) {
	case codes.OK:
		if st := resp.GetSession().GetState(); running && st != sessionv1.SessionState_SESSION_STATE_RUNNING {
			msg := fmt.Sprintf("session %s is %s", id, strings.TrimPrefix(st.String(), "SESSION_STATE_"))
			if r := resp.GetSession().GetStateReason(); r != "" {
				msg += " (" + r + ")"
			}
			return precondition("%s; a run needs a RUNNING session", msg)
		}
		return nil
	case codes.NotFound, codes.PermissionDenied:
		return sessionNotFound(id)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return &backendError{msg: fmt.Sprintf("check session %s: %s", id, status.Convert(err).Message()), err: err}
}

// newProvider builds a provider, the run's own key and base URL first, the
// service's configured ones otherwise.
func (s *Service) newProvider(ctx context.Context, name, key, baseURL string) (provider.Provider, error) {
	if err := s.checkBaseURL(name, baseURL); err != nil {
		return nil, invalid("%s", err.Error())
	}
	pcfg := provider.Config{Name: name, APIKey: key, BaseURL: baseURL}
	if pcfg.APIKey == "" {
		pcfg.APIKey = s.cfg.APIKeys[name]
	}
	if pcfg.BaseURL == "" {
		pcfg.BaseURL = s.cfg.BaseURLs[name]
	}
	if name == "anthropic" {
		pcfg.Platform, pcfg.Region, pcfg.Project = s.cfg.AnthropicPlatform, s.cfg.CloudRegion, s.cfg.CloudProject
	}
	prov, err := s.deps.NewProvider(ctx, pcfg)
	if errors.Is(err, provider.ErrUnknownProvider) {
		return nil, invalid("%s", err.Error())
	}
	if errors.Is(err, provider.ErrNoKey) {
		env := map[string]string{"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY"}[name]
		return nil, invalid(
			"no API key for provider %s: send api_key with the run (deskgrid runs create -provider-key), or start deskgrid with -%s-api-key or %s in its environment", name, name, env)
	}
	if err != nil {
		return nil, invalid("provider %s: %v", name, err)
	}
	return prov, nil
}

func (s *Service) newRun(rec *agentv1.Run, prov provider.Provider, seq int64) *run {
	r := &run{id: rec.GetId(), svc: s, prov: prov, rec: proto.Clone(rec).(*agentv1.Run)}
	r.log = runlog.New(rec.GetSessionId(), rec.GetId(), seq, s.cfg.EventRing, 0, s.sink(rec), s.replayer)
	r.exec = &tools.Executor{
		Display: s.deps.Display, Sandbox: s.deps.Sandbox, SessionID: rec.GetSessionId(), BashTimeout: s.cfg.BashTimeout,
		Settle: rec.GetOptions().GetSettle(), AccessibilityTree: rec.GetOptions().GetAccessibilityTree(),
		LeaseToken: func() int64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.lease.Token
		},
	}
	if prov != nil && prov.Name() == "gemini" {
		r.exec.Scale.Normalized = true
	}
	return r
}

func (s *Service) admit(r *run) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosing
	}
	if why := s.endedRecently(r.rec.GetSessionId()); why != nil {
		return precondition("%s; a run needs a RUNNING session", why.Error())
	}
	s.runs[r.id] = r
	return nil
}

// forgetLater drops a finished run's in-memory state after a while; its
// record stays in the store and its events in the event stream.
func (s *Service) forgetLater(r *run) {
	time.AfterFunc(s.cfg.FinishedRunTTL, func() {
		r.mu.Lock()
		st := r.rec.GetState()
		r.mu.Unlock()
		if !terminal(st) {
			return
		}
		s.mu.Lock()
		if s.runs[r.id] == r {
			delete(s.runs, r.id)
		}
		s.mu.Unlock()
	})
}

func (s *Service) live(id string) *run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id]
}

func (s *Service) getRun(ctx context.Context, id string) (*agentv1.Run, error) {
	if id == "" {
		return nil, invalid("run_id is required")
	}
	if r := s.live(id); r != nil {
		rec := r.snapshot()
		if !s.tenancy.Sees(ctx, rec.GetTenant()) {
			return nil, runNotFound(id)
		}
		return rec, nil
	}
	rec, err := s.store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, runNotFound(id)
	}
	if err != nil {
		return nil, storeErr("read run "+id, err)
	}
	// Another tenant's run does not exist for this caller.
	if !s.tenancy.Sees(ctx, rec.GetTenant()) {
		return nil, runNotFound(id)
	}
	return rec, nil
}

// GetRun returns one run.
func (s *Service) GetRun(ctx context.Context, req *agentv1.GetRunRequest) (*agentv1.GetRunResponse, error) {
	rec, err := s.getRun(ctx, req.GetRunId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &agentv1.GetRunResponse{Run: rec}, nil
}

// ListRuns lists a session's runs, newest first.
func (s *Service) ListRuns(ctx context.Context, req *agentv1.ListRunsRequest) (*agentv1.ListRunsResponse, error) {
	if req.GetSessionId() == "" {
		return nil, s.toStatus(ctx, invalid("session_id is required"))
	}
	if req.GetPageSize() < 0 || req.GetPageSize() > 1000 {
		return nil, s.toStatus(ctx, invalid("page_size must be between 0 and 1000"))
	}
	// The caller's tenant's runs; every tenant's for the system and with
	// auth off; none for an anonymous caller.
	tenant, err := s.tenancy.Scope(ctx)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	runs, next, err := s.store.List(ctx, tenant, req.GetSessionId(), int(req.GetPageSize()), req.GetPageToken())
	if err != nil {
		return nil, s.toStatus(ctx, storeErr("list runs", err))
	}
	for i, rec := range runs {
		if r := s.live(rec.GetId()); r != nil {
			runs[i] = r.snapshot()
		}
	}
	return &agentv1.ListRunsResponse{Runs: runs, NextPageToken: next}, nil
}

// CancelRun stops a run: the provider call and the running tool.
func (s *Service) CancelRun(ctx context.Context, req *agentv1.CancelRunRequest) (*agentv1.CancelRunResponse, error) {
	rec, err := s.getRun(ctx, req.GetRunId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	r := s.live(rec.GetId())
	if r == nil || terminal(rec.GetState()) {
		return &agentv1.CancelRunResponse{Run: rec}, nil
	}
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel != nil {
		cancel(nil)
		select {
		case <-done:
		case <-ctx.Done():
			return nil, s.toStatus(ctx, ctx.Err())
		}
	}
	return &agentv1.CancelRunResponse{Run: r.snapshot()}, nil
}

// SendMessage continues a run's conversation.
func (s *Service) SendMessage(ctx context.Context, req *agentv1.SendMessageRequest) (*agentv1.SendMessageResponse, error) {
	rec, err := s.sendMessage(ctx, req)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &agentv1.SendMessageResponse{Run: rec}, nil
}

func (s *Service) sendMessage(ctx context.Context, req *agentv1.SendMessageRequest) (*agentv1.Run, error) {
	if strings.TrimSpace(req.GetText()) == "" {
		return nil, invalid("text is required")
	}
	rec, err := s.getRun(ctx, req.GetRunId())
	if err != nil {
		return nil, err
	}
	r := s.live(rec.GetId())
	if r == nil {
		if r, err = s.revive(ctx, rec, req.GetApiKey()); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	if !terminal(r.rec.GetState()) {
		// Delivered with the next tool results, or when the model stops.
		r.inbox = append(r.inbox, req.GetText())
		r.mu.Unlock()
		r.log.Append(&agentv1.RunEvent{Event: &agentv1.RunEvent_UserMessage{UserMessage: req.GetText()}})
		return r.snapshot(), nil
	}
	done := r.done
	r.mu.Unlock()
	if done != nil {
		<-done
	}
	// Continuing starts the loop again: only on a RUNNING session.
	if err := s.checkSession(ctx, rec.GetSessionId(), true); err != nil {
		return nil, err
	}
	s.mu.Lock()
	why := s.endedRecently(rec.GetSessionId())
	s.mu.Unlock()
	if why != nil {
		return nil, precondition("%s; a run needs a RUNNING session", why.Error())
	}
	r.mu.Lock()
	r.conv = append(r.conv, provider.UserText(req.GetText()))
	r.rec.State = agentv1.RunState_RUN_STATE_QUEUED
	r.rec.StateReason = ""
	r.rec.Steps = 0
	r.mu.Unlock()
	r.log.Reopen(s.sink(r.snapshot()))
	r.log.Append(&agentv1.RunEvent{Event: &agentv1.RunEvent_UserMessage{UserMessage: req.GetText()}})
	r.start()
	return r.snapshot(), nil
}

// revive loads a run this process no longer holds (finished long ago, or
// run before a restart) so its conversation can go on.
func (s *Service) revive(ctx context.Context, rec *agentv1.Run, apiKey string) (*run, error) {
	a, err := s.store.Access(ctx, rec.GetId())
	if err != nil {
		return nil, storeErr("read run "+rec.GetId(), err)
	}
	key := apiKey
	if key == "" && a.OwnKey {
		if s.sealer != nil && len(a.SealedKey) > 0 {
			if k, err := s.sealer.Open(a.SealedKey, []byte(rec.GetId())); err == nil {
				key = string(k)
			} else {
				s.logger.Warn("sealed api key of run does not open", "run", rec.GetId(), "err", err)
			}
		}
		if key == "" {
			return nil, precondition("run %s used its own API key, which this agent service no longer holds; send it again in api_key", rec.GetId())
		}
	}
	prov, err := s.newProvider(ctx, rec.GetProvider(), key, a.BaseURL)
	if err != nil {
		return nil, err
	}
	data, err := s.store.Conversation(ctx, rec.GetId())
	if err != nil {
		return nil, storeErr("read run "+rec.GetId(), err)
	}
	var conv []provider.Message
	if len(data) > 0 {
		if err := json.Unmarshal(data, &conv); err != nil {
			return nil, precondition("run %s: its stored conversation is unreadable (%v); start a new run", rec.GetId(), err)
		}
	}
	if len(conv) == 0 {
		conv = []provider.Message{provider.UserText(rec.GetPrompt())}
	}
	if !terminal(rec.GetState()) {
		// The process running it ended without recording its end.
		rec.State = agentv1.RunState_RUN_STATE_FAILED
		rec.StateReason = "interrupted: the agent service stopped during the run"
	}
	r := s.newRun(rec, prov, rec.GetEventSequence())
	r.conv = conv
	r.log.Finish()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosing
	}
	if cur := s.runs[r.id]; cur != nil {
		return cur, nil
	}
	s.runs[r.id] = r
	s.forgetLater(r)
	return r, nil
}

func (s *Service) decide(ctx context.Context, runID, callID string, d decision) (*agentv1.Run, error) {
	rec, err := s.getRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	r := s.live(rec.GetId())
	if r == nil {
		return nil, precondition("run %s is not waiting for approval", runID)
	}
	r.mu.Lock()
	ch, pending := r.decision, r.rec.GetPendingToolCall()
	if ch == nil || pending == nil || r.rec.GetState() != agentv1.RunState_RUN_STATE_WAITING_APPROVAL {
		r.mu.Unlock()
		return nil, precondition("run %s is not waiting for approval", runID)
	}
	if callID != "" && callID != pending.GetId() {
		r.mu.Unlock()
		return nil, precondition("the pending tool call is %s, not %s", pending.GetId(), callID)
	}
	d.callID = pending.GetId()
	select {
	case ch <- d:
	default:
		r.mu.Unlock()
		return nil, precondition("tool call %s was already decided", pending.GetId())
	}
	r.mu.Unlock()
	// Answer once the run has moved on, so the caller sees the new state.
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		snap := r.snapshot()
		if snap.GetState() != agentv1.RunState_RUN_STATE_WAITING_APPROVAL || snap.GetPendingToolCall().GetId() != d.callID {
			return snap, nil
		}
		select {
		case <-deadline.C:
			return snap, nil
		case <-ctx.Done():
			return snap, nil
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ApproveStep lets the pending tool call run.
func (s *Service) ApproveStep(ctx context.Context, req *agentv1.ApproveStepRequest) (*agentv1.ApproveStepResponse, error) {
	rec, err := s.decide(ctx, req.GetRunId(), req.GetToolCallId(), decision{ok: true})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &agentv1.ApproveStepResponse{Run: rec}, nil
}

// RejectStep refuses the pending tool call.
func (s *Service) RejectStep(ctx context.Context, req *agentv1.RejectStepRequest) (*agentv1.RejectStepResponse, error) {
	rec, err := s.decide(ctx, req.GetRunId(), req.GetToolCallId(), decision{reason: req.GetReason()})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &agentv1.RejectStepResponse{Run: rec}, nil
}

// StreamRunEvents streams a run's events after a sequence number, live
// until the run finishes.
func (s *Service) StreamRunEvents(req *agentv1.StreamRunEventsRequest, stream grpc.ServerStreamingServer[agentv1.StreamRunEventsResponse]) error {
	ctx := stream.Context()
	return s.toStatus(ctx, s.streamRunEvents(ctx, req, stream))
}

func (s *Service) streamRunEvents(ctx context.Context, req *agentv1.StreamRunEventsRequest, stream grpc.ServerStreamingServer[agentv1.StreamRunEventsResponse]) error {
	if req.GetAfterSequence() < 0 {
		return invalid("after_sequence must not be negative")
	}
	rec, err := s.getRun(ctx, req.GetRunId())
	if err != nil {
		return err
	}
	send := func(ev *agentv1.RunEvent) error {
		return stream.Send(&agentv1.StreamRunEventsResponse{Event: ev})
	}
	if r := s.live(rec.GetId()); r != nil {
		return streamErr(ctx, r.log.Read(ctx, req.GetAfterSequence(), send))
	}
	// Not in this process: the event stream has the run's events.
	if s.replayer == nil {
		return &goneError{msg: fmt.Sprintf("the events of run %s are no longer kept", rec.GetId())}
	}
	err = s.replayer.Replay(ctx, rec.GetSessionId(), rec.GetId(), req.GetAfterSequence(), 0, send)
	if err != nil && ctx.Err() == nil && !errors.Is(err, runlog.ErrGone) && status.Code(err) == codes.Unknown {
		// Neither the caller's end nor a send that failed: the event
		// stream did not answer.
		return &backendError{msg: fmt.Sprintf("events of run %s: the event stream did not answer; retry shortly", rec.GetId()), err: err}
	}
	return streamErr(ctx, err)
}

// streamErr is what a stream's reading ended with: the caller's own end
// when it ended, else err.
func streamErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
