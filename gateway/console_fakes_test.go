package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// fakeAgent keeps runs as the agent service does: an append-only event log
// per run with sequence numbers from 1, read from any sequence on and live
// until the run reaches a terminal state. CreateRun plays a scripted
// conversation (what a provider answering "look at the screen" produces);
// tests may also append events themselves.
type fakeAgent struct {
	agentv1.UnimplementedAgentServiceServer
	history *fakeHistory

	mu      sync.Mutex
	runs    map[string]*fakeRun
	next    int
	created []*agentv1.CreateRunRequest
	// manual runs are not scripted: the test appends their events.
	manual bool
	// sentBytes counts the event bytes StreamRunEvents has sent; streamsEnded
	// counts the streams that returned.
	sentBytes    atomic.Int64
	streamsEnded atomic.Int64

	lease     *agentv1.InputLease
	leaseFree chan struct{}
	token     int64
}

type fakeRun struct {
	run     *agentv1.Run
	events  []*agentv1.RunEvent
	changed chan struct{}
	done    bool
	// decision carries ApproveStep ("") or RejectStep (the reason) to a
	// run waiting for approval.
	decision chan *string
}

func newFakeAgent(h *fakeHistory) *fakeAgent {
	return &fakeAgent{history: h, runs: map[string]*fakeRun{}}
}

const (
	scriptedFirstText = "Let me look at the screen. "
	scriptedLastText  = "The desktop is ready."
)

func (a *fakeAgent) addRun(r *agentv1.Run) *fakeRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	fr := &fakeRun{run: r, changed: make(chan struct{}), decision: make(chan *string, 1)}
	a.runs[r.GetId()] = fr
	return fr
}

// emit appends an event to a run's log and wakes its readers.
func (a *fakeAgent) emit(runID string, ev *agentv1.RunEvent) {
	a.mu.Lock()
	fr := a.runs[runID]
	ev.Sequence = int64(len(fr.events) + 1)
	ev.RunId = runID
	ev.Time = timestamppb.Now()
	fr.events = append(fr.events, ev)
	if st, ok := ev.GetEvent().(*agentv1.RunEvent_State); ok {
		fr.run.State = st.State
		fr.run.StateReason = ev.GetReason()
		switch st.State {
		case agentv1.RunState_RUN_STATE_SUCCEEDED, agentv1.RunState_RUN_STATE_FAILED, agentv1.RunState_RUN_STATE_CANCELLED:
			fr.done = true
		}
	}
	close(fr.changed)
	fr.changed = make(chan struct{})
	sessionID := fr.run.GetSessionId()
	a.mu.Unlock()
	if a.history != nil {
		a.history.recordRunEvent(sessionID, ev)
	}
}

func (a *fakeAgent) CreateRun(_ context.Context, r *agentv1.CreateRunRequest) (*agentv1.CreateRunResponse, error) {
	if r.GetPrompt() == "" {
		return nil, status.Error(codes.InvalidArgument, "prompt is required")
	}
	switch r.GetProvider() {
	case "anthropic", "openai", "gemini":
	default:
		return nil, status.Errorf(codes.InvalidArgument, "provider must be anthropic, openai or gemini, got %q", r.GetProvider())
	}
	a.mu.Lock()
	a.next++
	id := fmt.Sprintf("r-%d", a.next)
	a.created = append(a.created, r)
	manual := a.manual
	a.mu.Unlock()
	run := &agentv1.Run{Id: id, SessionId: r.GetSessionId(), State: agentv1.RunState_RUN_STATE_QUEUED, Provider: r.GetProvider(),
		Model: r.GetModel(), Prompt: r.GetPrompt(), MaxSteps: r.GetMaxSteps(), CreateTime: timestamppb.Now(), Options: r.GetOptions()}
	reply := proto2Run(run)
	fr := a.addRun(run)
	if !manual {
		go a.script(fr, r.GetPrompt(), len(r.GetOptions().GetApprovalTools()) > 0)
	}
	return &agentv1.CreateRunResponse{Run: reply}, nil
}

func proto2Run(r *agentv1.Run) *agentv1.Run { return proto.Clone(r).(*agentv1.Run) }

func (a *fakeAgent) lastCreated() *agentv1.CreateRunRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.created) == 0 {
		return nil
	}
	return a.created[len(a.created)-1]
}

// script is the conversation of a run against a provider that looks at the
// screen and answers; with approval, the screenshot waits for ApproveStep
// and RejectStep fails the call with the reason.
func (a *fakeAgent) script(fr *fakeRun, prompt string, approval bool) {
	id := fr.run.GetId()
	a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_State{State: agentv1.RunState_RUN_STATE_RUNNING}})
	a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_UserMessage{UserMessage: prompt}})
	a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_TextDelta{TextDelta: scriptedFirstText[:10]}, Step: 1})
	a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_TextDelta{TextDelta: scriptedFirstText[10:]}, Step: 1})
	call := &agentv1.ToolCall{Id: "call-1", Tool: "computer", InputJson: `{"action":"screenshot"}`}
	a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_ToolCall{ToolCall: call}, Step: 1})
	if approval {
		a.mu.Lock()
		fr.run.PendingToolCall = proto.Clone(call).(*agentv1.ToolCall)
		a.mu.Unlock()
		a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_State{State: agentv1.RunState_RUN_STATE_WAITING_APPROVAL}, Reason: "computer needs approval"})
		rejected := <-fr.decision
		a.mu.Lock()
		fr.run.PendingToolCall = nil
		a.mu.Unlock()
		a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_State{State: agentv1.RunState_RUN_STATE_RUNNING}})
		if rejected != nil {
			a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_ToolCall{ToolCall: &agentv1.ToolCall{Id: "call-1", Tool: "computer",
				InputJson: call.InputJson, Output: "rejected: " + *rejected, IsError: true, Finished: true}}, Step: 1})
			a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_TextDelta{TextDelta: "I was not allowed to look."}, Step: 2})
			a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_State{State: agentv1.RunState_RUN_STATE_SUCCEEDED}, Reason: "end_turn"})
			return
		}
	}
	a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_Screenshot{Screenshot: &agentv1.ScreenshotRef{
		ToolCallId: "call-1", ContentType: "image/png", Width: 64, Height: 48, SizeBytes: int64(len(fakeScreenshotPNG))}}, Step: 1})
	done := &agentv1.ToolCall{Id: "call-1", Tool: "computer", InputJson: call.InputJson, Output: "took a 64x48 screenshot", Finished: true}
	a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_ToolCall{ToolCall: done}, Step: 1})
	a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_TextDelta{TextDelta: scriptedLastText}, Step: 2})
	a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_Usage{Usage: &agentv1.Usage{InputTokens: 1200, OutputTokens: 42}}, Step: 2})
	a.emit(id, &agentv1.RunEvent{Event: &agentv1.RunEvent_State{State: agentv1.RunState_RUN_STATE_SUCCEEDED}, Reason: "end_turn"})
}

func (a *fakeAgent) getRun(id string) (*fakeRun, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fr, ok := a.runs[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "run %s not found", id)
	}
	return fr, nil
}

func (a *fakeAgent) GetRun(_ context.Context, r *agentv1.GetRunRequest) (*agentv1.GetRunResponse, error) {
	fr, err := a.getRun(r.GetRunId())
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return &agentv1.GetRunResponse{Run: proto2Run(fr.run)}, nil
}

func (a *fakeAgent) decide(runID string, rejected *string) (*agentv1.Run, error) {
	fr, err := a.getRun(runID)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if fr.run.GetState() != agentv1.RunState_RUN_STATE_WAITING_APPROVAL {
		return nil, status.Errorf(codes.FailedPrecondition, "run %s is not waiting for approval", runID)
	}
	select {
	case fr.decision <- rejected:
	default:
		return nil, status.Errorf(codes.FailedPrecondition, "run %s already has a decision", runID)
	}
	return proto2Run(fr.run), nil
}

func (a *fakeAgent) ApproveStep(_ context.Context, r *agentv1.ApproveStepRequest) (*agentv1.ApproveStepResponse, error) {
	run, err := a.decide(r.GetRunId(), nil)
	if err != nil {
		return nil, err
	}
	return &agentv1.ApproveStepResponse{Run: run}, nil
}

func (a *fakeAgent) RejectStep(_ context.Context, r *agentv1.RejectStepRequest) (*agentv1.RejectStepResponse, error) {
	reason := r.GetReason()
	run, err := a.decide(r.GetRunId(), &reason)
	if err != nil {
		return nil, err
	}
	return &agentv1.RejectStepResponse{Run: run}, nil
}

func (a *fakeAgent) CancelRun(_ context.Context, r *agentv1.CancelRunRequest) (*agentv1.CancelRunResponse, error) {
	fr, err := a.getRun(r.GetRunId())
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	done := fr.done
	a.mu.Unlock()
	if !done {
		a.emit(r.GetRunId(), &agentv1.RunEvent{Event: &agentv1.RunEvent_State{State: agentv1.RunState_RUN_STATE_CANCELLED}, Reason: "cancelled by the client"})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return &agentv1.CancelRunResponse{Run: proto2Run(fr.run)}, nil
}

func (a *fakeAgent) ListRuns(_ context.Context, r *agentv1.ListRunsRequest) (*agentv1.ListRunsResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*agentv1.Run
	for _, fr := range a.runs {
		if fr.run.GetSessionId() == r.GetSessionId() {
			out = append(out, proto2Run(fr.run))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() > out[j].GetId() })
	return &agentv1.ListRunsResponse{Runs: out}, nil
}

func (a *fakeAgent) StreamRunEvents(r *agentv1.StreamRunEventsRequest, stream agentv1.AgentService_StreamRunEventsServer) error {
	if r.GetAfterSequence() < 0 {
		return status.Error(codes.InvalidArgument, "after_sequence must not be negative")
	}
	fr, err := a.getRun(r.GetRunId())
	if err != nil {
		return err
	}
	defer a.streamsEnded.Add(1)
	next := r.GetAfterSequence()
	for {
		a.mu.Lock()
		var batch []*agentv1.RunEvent
		if next < int64(len(fr.events)) {
			batch = fr.events[next:]
		}
		done, changed := fr.done, fr.changed
		a.mu.Unlock()
		for _, ev := range batch {
			if err := stream.Send(&agentv1.StreamRunEventsResponse{Event: ev}); err != nil {
				return err
			}
			a.sentBytes.Add(int64(proto.Size(ev)))
			next = ev.GetSequence()
		}
		if done && len(batch) == 0 {
			return nil
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
}

// AcquireInputLease grants the one lease, waiting while another holds it.
func (a *fakeAgent) AcquireInputLease(ctx context.Context, r *agentv1.AcquireInputLeaseRequest) (*agentv1.AcquireInputLeaseResponse, error) {
	if r.GetHolder() == "" {
		return nil, status.Error(codes.InvalidArgument, "holder is required")
	}
	if w := r.GetWait().AsDuration(); r.GetWait() != nil && w > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w)
		defer cancel()
	}
	for {
		a.mu.Lock()
		if a.lease == nil {
			a.token++
			a.lease = &agentv1.InputLease{SessionId: r.GetSessionId(), Holder: r.GetHolder(), Token: a.token, LeaseId: fmt.Sprintf("%032x", a.token),
				ExpireTime: timestamppb.New(time.Now().Add(30 * time.Second))}
			a.leaseFree = make(chan struct{})
			l := proto.Clone(a.lease).(*agentv1.InputLease)
			a.mu.Unlock()
			return &agentv1.AcquireInputLeaseResponse{Lease: l}, nil
		}
		free := a.leaseFree
		a.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return nil, status.Errorf(codes.DeadlineExceeded, "the input lease of session %s is held by %s", r.GetSessionId(), a.holder())
		}
	}
}

func (a *fakeAgent) holder() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lease == nil {
		return ""
	}
	return a.lease.GetHolder()
}

// GetInputLease tells the lease of the session, without its id.
func (a *fakeAgent) GetInputLease(_ context.Context, r *agentv1.GetInputLeaseRequest) (*agentv1.GetInputLeaseResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lease == nil || a.lease.GetSessionId() != r.GetSessionId() {
		return &agentv1.GetInputLeaseResponse{}, nil
	}
	l := proto.Clone(a.lease).(*agentv1.InputLease)
	l.LeaseId = ""
	return &agentv1.GetInputLeaseResponse{Lease: l}, nil
}

func (a *fakeAgent) RenewInputLease(_ context.Context, r *agentv1.RenewInputLeaseRequest) (*agentv1.RenewInputLeaseResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lease == nil || r.GetLeaseId() == "" || a.lease.GetLeaseId() != r.GetLeaseId() {
		return nil, status.Error(codes.FailedPrecondition, "input lease not held")
	}
	a.lease.ExpireTime = timestamppb.New(time.Now().Add(30 * time.Second))
	return &agentv1.RenewInputLeaseResponse{Lease: proto.Clone(a.lease).(*agentv1.InputLease)}, nil
}

func (a *fakeAgent) ReleaseInputLease(_ context.Context, r *agentv1.ReleaseInputLeaseRequest) (*agentv1.ReleaseInputLeaseResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lease == nil || r.GetLeaseId() == "" || a.lease.GetLeaseId() != r.GetLeaseId() {
		return nil, status.Error(codes.FailedPrecondition, "input lease not held")
	}
	a.lease = nil
	close(a.leaseFree)
	return &agentv1.ReleaseInputLeaseResponse{}, nil
}

// fakeScreenshotPNG is the screenshot every scripted run takes.
var fakeScreenshotPNG = func() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 64, 48))
	for y := range 48 {
		for x := range 64 {
			img.Set(x, y, color.RGBA{0x12, 0xa0, 0x63, 0xff})
		}
	}
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return b.Bytes()
}()

// fakeHistory records entries as the history service derives them from
// events: lifecycle, messages, tool calls and results, screenshots (bytes
// kept once as a blob) and usage.
type fakeHistory struct {
	historyv1.UnimplementedHistoryServiceServer
	mu      sync.Mutex
	entries []*historyv1.Entry
	blobs   map[string][]byte
	seq     int64
}

func newFakeHistory() *fakeHistory { return &fakeHistory{blobs: map[string][]byte{}} }

func (h *fakeHistory) add(e *historyv1.Entry, data map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	e.Sequence = h.seq
	e.Id = fmt.Sprintf("e-%d", h.seq)
	if e.Time == nil {
		e.Time = timestamppb.Now()
	}
	if data != nil {
		e.Data, _ = structpb.NewStruct(data)
	}
	h.entries = append(h.entries, e)
}

func (h *fakeHistory) recordSession(s *sessionv1.Session) {
	h.add(&historyv1.Entry{SessionId: s.GetId(), Type: "session.state_changed.v1", Kind: historyv1.EntryKind_ENTRY_KIND_LIFECYCLE},
		map[string]any{"state": s.GetState().String(), "reason": s.GetStateReason()})
}

func (h *fakeHistory) recordRunEvent(sessionID string, ev *agentv1.RunEvent) {
	e := &historyv1.Entry{SessionId: sessionID, RunId: ev.GetRunId(), Time: ev.GetTime()}
	var data map[string]any
	switch x := ev.GetEvent().(type) {
	case *agentv1.RunEvent_State:
		e.Type, e.Kind = "agent.run_state_changed.v1", historyv1.EntryKind_ENTRY_KIND_LIFECYCLE
		data = map[string]any{"runId": ev.GetRunId(), "state": x.State.String(), "reason": ev.GetReason()}
	case *agentv1.RunEvent_UserMessage:
		e.Type, e.Kind = "agent.message.v1", historyv1.EntryKind_ENTRY_KIND_MESSAGE
		data = map[string]any{"runId": ev.GetRunId(), "role": "ROLE_USER", "text": x.UserMessage}
	case *agentv1.RunEvent_ToolCall:
		if x.ToolCall.GetFinished() {
			e.Type, e.Kind = "agent.tool_result.v1", historyv1.EntryKind_ENTRY_KIND_TOOL_RESULT
			data = map[string]any{"runId": ev.GetRunId(), "callId": x.ToolCall.GetId(), "tool": x.ToolCall.GetTool(), "output": x.ToolCall.GetOutput()}
		} else {
			e.Type, e.Kind = "agent.tool_call.v1", historyv1.EntryKind_ENTRY_KIND_TOOL_CALL
			data = map[string]any{"runId": ev.GetRunId(), "callId": x.ToolCall.GetId(), "tool": x.ToolCall.GetTool(), "inputJson": x.ToolCall.GetInputJson()}
		}
	case *agentv1.RunEvent_Screenshot:
		sum := sha256.Sum256(fakeScreenshotPNG)
		hash := hex.EncodeToString(sum[:])
		h.mu.Lock()
		h.blobs[hash] = fakeScreenshotPNG
		h.mu.Unlock()
		e.Type, e.Kind, e.BlobHash = "agent.screenshot.v1", historyv1.EntryKind_ENTRY_KIND_SCREENSHOT, hash
		data = map[string]any{"runId": ev.GetRunId(), "callId": x.Screenshot.GetToolCallId(), "contentType": "image/png",
			"width": float64(x.Screenshot.GetWidth()), "height": float64(x.Screenshot.GetHeight()), "blobHash": hash}
	case *agentv1.RunEvent_Usage:
		e.Type, e.Kind = "agent.usage.v1", historyv1.EntryKind_ENTRY_KIND_USAGE
		data = map[string]any{"runId": ev.GetRunId(), "inputTokens": float64(x.Usage.GetInputTokens()), "outputTokens": float64(x.Usage.GetOutputTokens())}
	default:
		// Text deltas reach the history as whole messages, not recorded here.
		return
	}
	h.add(e, data)
}

func kindWanted(kinds []historyv1.EntryKind, k historyv1.EntryKind) bool {
	if len(kinds) == 0 {
		return true
	}
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

func (h *fakeHistory) ListSessionHistory(_ context.Context, r *historyv1.ListSessionHistoryRequest) (*historyv1.ListSessionHistoryResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*historyv1.Entry
	for _, e := range h.entries {
		if e.GetSessionId() == r.GetSessionId() && e.GetSequence() > r.GetAfterSequence() && kindWanted(r.GetKinds(), e.GetKind()) {
			out = append(out, e)
		}
	}
	return &historyv1.ListSessionHistoryResponse{Entries: out}, nil
}

func (h *fakeHistory) ListRunEntries(_ context.Context, r *historyv1.ListRunEntriesRequest) (*historyv1.ListRunEntriesResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*historyv1.Entry
	for _, e := range h.entries {
		if e.GetRunId() == r.GetRunId() && e.GetSequence() > r.GetAfterSequence() && kindWanted(r.GetKinds(), e.GetKind()) {
			out = append(out, e)
		}
	}
	return &historyv1.ListRunEntriesResponse{Entries: out}, nil
}

func (h *fakeHistory) GetBlob(_ context.Context, r *historyv1.GetBlobRequest) (*historyv1.GetBlobResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.blobs[r.GetHash()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "blob %s not found", r.GetHash())
	}
	return &historyv1.GetBlobResponse{ContentType: "image/png", Data: b}, nil
}

// fakeNodes is the node registry of one machine; its load is the sessions
// the session fake holds.
type fakeNodes struct {
	sessionv1.UnimplementedNodeServiceServer
	sessions *sessions
}

func (n fakeNodes) ListNodes(context.Context, *sessionv1.ListNodesRequest) (*sessionv1.ListNodesResponse, error) {
	n.sessions.mu.Lock()
	count := int64(len(n.sessions.byID))
	n.sessions.mu.Unlock()
	return &sessionv1.ListNodesResponse{Nodes: []*sessionv1.Node{{
		Id: "node-1", Address: "127.0.0.1:7001", State: sessionv1.NodeState_NODE_STATE_READY,
		Labels:   map[string]string{"zone": "local"},
		Capacity: &sessionv1.NodeResources{Sessions: 50, CpuMillis: 2000, MemoryBytes: 24 << 30},
		Used:     &sessionv1.NodeResources{Sessions: count, CpuMillis: 100 * count, MemoryBytes: count * 64 << 20},
	}}}, nil
}
