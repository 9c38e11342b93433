package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/cgroup"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
)

// proc is a program started to run on its own, such as a desktop's
// autostart program. Each has its own bwrap; all share the sandbox's cgroup.
type proc struct {
	id   string
	argv []string
	// req is what started it, to start it again with its container.
	req     *sandboxv1.StartProcessRequest
	started time.Time
	p       *jail.Proc
	// out keeps the end of what it wrote.
	out *outputTail
	// stopping says it is being stopped on purpose (StopProcess, the
	// sandbox's end), so its exit is no news.
	stopping atomic.Bool
}

// tailBytes bounds the output a started program's record keeps.
const tailBytes = 4096

// outputTail keeps the last tailBytes written to it; done closes once the
// program and whatever shared its output have closed it.
type outputTail struct {
	mu sync.Mutex
	b  []byte
	// cut says the start of the output was dropped.
	cut  bool
	done chan struct{}
}

func (t *outputTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2*tailBytes {
		t.b = append([]byte(nil), t.b[len(t.b)-tailBytes:]...)
		t.cut = true
	}
	return len(p), nil
}

// String is the kept output, from a line's start when it was cut.
func (t *outputTail) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	b, cut := t.b, t.cut
	t.mu.Unlock()
	if cut || len(b) > tailBytes {
		b = b[max(len(b)-tailBytes, 0):]
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func (p *proc) proto() *sandboxv1.Process {
	out := &sandboxv1.Process{
		ProcessId:  p.id,
		Argv:       p.argv,
		Pid:        int64(p.p.Pid()),
		State:      sandboxv1.ProcessState_PROCESS_STATE_RUNNING,
		StartTime:  timestamppb.New(p.started),
		OutputTail: p.out.String(),
	}
	select {
	case <-p.p.Done():
		out.State = sandboxv1.ProcessState_PROCESS_STATE_EXITED
		exit, _ := p.p.Exit()
		out.Exit = &sandboxv1.ExecExit{ExitCode: int32(exit.Code), Signal: exit.Signal}
	default:
	}
	return out
}

// maxProcs bounds the started programs a sandbox remembers, running or not.
const maxProcs = 256

func (s *Service) startProcess(ctx context.Context, req *sandboxv1.StartProcessRequest) (*sandboxv1.Process, error) {
	return s.startProcessAs(ctx, req, "")
}

// startProcessAs is startProcess under process id id, or a new id when id
// is "" (id is a program's own when its container restarts it).
func (s *Service) startProcessAs(ctx context.Context, req *sandboxv1.StartProcessRequest, id string) (*sandboxv1.Process, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := validateArgv(req.GetArgv()); err != nil {
		return nil, err
	}
	if err := jail.ValidateEnv(req.GetEnv()); err != nil {
		return nil, invalidf("%v", err)
	}
	cwd, err := execCwd(req.GetCwd())
	if err != nil {
		return nil, err
	}
	b, release, err := s.acquire(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	defer release()
	spec, err := s.jailSpec(ctx, b, req.GetArgv(), req.GetEnv(), cwd, req.GetCwd(), req.GetAsRoot())
	if err != nil {
		return nil, err
	}

	b.pmu.Lock()
	defer b.pmu.Unlock()
	if b.frozen {
		return nil, failf(errFrozen, "session %q's sandbox is frozen; thaw it first", b.id)
	}
	if len(b.procs) >= maxProcs {
		b.forgetEnded()
		if len(b.procs) >= maxProcs {
			return nil, failf(errNoRoom, "session %q already runs %d started programs", b.id, len(b.procs))
		}
	}
	// Its output is kept (the end of it), so a program that ends at once
	// can say why.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start process: %w", err)
	}
	jp, err := jail.Spawn(spec, nil, w)
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("start process: %w", err)
	}
	out := &outputTail{done: make(chan struct{})}
	go func() {
		_, _ = io.Copy(out, r)
		_ = r.Close()
		close(out.done)
	}()
	if id == "" {
		b.nextProc++
		id = fmt.Sprintf("p%d", b.nextProc)
	}
	p := &proc{id: id, argv: req.GetArgv(), req: proto.Clone(req).(*sandboxv1.StartProcessRequest), started: time.Now().UTC(), p: jp, out: out}
	b.procs[p.id] = p
	s.log.InfoContext(ctx, "process started", "session_id", b.id, "process_id", p.id, "argv0", p.argv[0], "pid", jp.Pid())
	go s.logExit(b.id, p)
	return p.proto(), nil
}

// logExit logs how a started program ended, with the end of its output:
// a warning when it ended on its own, not asked to.
func (s *Service) logExit(sessionID string, p *proc) {
	<-p.p.Done()
	select {
	case <-p.out.done:
	case <-time.After(time.Second):
		// Something it started still holds its output; what came is enough.
	}
	exit, _ := p.p.Exit()
	attrs := []any{"session_id", sessionID, "process_id", p.id, "argv0", p.argv[0], "exit_code", exit.Code, "signal", exit.Signal, "output_tail", p.out.String()}
	if p.stopping.Load() {
		s.log.Info("process stopped", attrs...)
		return
	}
	s.log.Warn("process exited", attrs...)
}

// forgetEnded drops ended programs; pmu is held.
func (b *box) forgetEnded() {
	for id, p := range b.procs {
		select {
		case <-p.p.Done():
			delete(b.procs, id)
		default:
		}
	}
}

func (s *Service) stopProcess(ctx context.Context, id, processID string) (*sandboxv1.Process, error) {
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	defer release()
	b.pmu.Lock()
	p := b.procs[processID]
	frozen := b.frozen
	b.pmu.Unlock()
	if p == nil {
		return nil, failf(errNotFound, "session %q has no process %q", id, processID)
	}
	if frozen {
		// A frozen process cannot die before it is thawed.
		return nil, failf(errFrozen, "session %q's sandbox is frozen; thaw it first", id)
	}
	p.stopping.Store(true)
	p.p.Kill()
	select {
	case <-p.p.Done():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return p.proto(), nil
}

func (s *Service) listProcesses(ctx context.Context, id string) ([]*sandboxv1.Process, error) {
	b, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	b.pmu.Lock()
	defer b.pmu.Unlock()
	out := make([]*sandboxv1.Process, 0, len(b.procs))
	for _, p := range b.procs {
		out = append(out, p.proto())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetStartTime().AsTime().Before(out[j].GetStartTime().AsTime()) })
	return out, nil
}

// stopAll kills every process of the sandbox, started programs and
// commands alike, and waits for the started programs to end.
func (b *box) stopAll() {
	b.pmu.Lock()
	defer b.pmu.Unlock()
	for _, p := range b.procs {
		p.stopping.Store(true)
	}
	if b.cg != nil {
		// Also what escaped its bwrap's process tree (a double fork cannot
		// leave its cgroup); thaws a frozen sandbox once everything is dead.
		_ = b.cg.Kill(5 * time.Second)
		b.frozen = false
	}
	for _, p := range b.procs {
		p.p.Kill()
	}
	for _, p := range b.procs {
		<-p.p.Done()
	}
	b.stopShell()
}

func (b *box) isFrozen() bool {
	b.pmu.Lock()
	defer b.pmu.Unlock()
	return b.frozen
}

func (s *Service) freeze(ctx context.Context, id string, freeze bool) error {
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	if b.cg == nil {
		return failf(errPrecondition, "this node runs sandboxes without cgroups: session %q cannot be frozen", id)
	}
	b.pmu.Lock()
	defer b.pmu.Unlock()
	if freeze {
		err = b.cg.Freeze()
	} else {
		err = b.cg.Thaw()
	}
	if err != nil {
		return fmt.Errorf("session %s: %w", id, err)
	}
	b.frozen = freeze
	s.log.InfoContext(ctx, "sandbox frozen state changed", "session_id", id, "frozen", freeze)
	return nil
}

func (s *Service) usage(b *box) *sandboxv1.SandboxUsage {
	if b.cg == nil {
		return nil
	}
	u, err := b.cg.Usage()
	if err != nil {
		return nil
	}
	return usageProto(u)
}

func usageProto(u cgroup.Usage) *sandboxv1.SandboxUsage {
	return &sandboxv1.SandboxUsage{CpuNanos: u.CPUNanos, MemoryBytes: u.MemoryBytes, Pids: u.Pids, OomKills: u.OOMKills}
}

// endPrograms marks the started programs still running in b as stopped on
// purpose and returns them, oldest first, for restartPrograms: a session on
// an image whose container restarts (a discard, a snapshot restore) gets
// its desktop and autostart programs back.
func (b *box) endPrograms() []*proc {
	b.pmu.Lock()
	defer b.pmu.Unlock()
	var out []*proc
	for _, p := range b.procs {
		select {
		case <-p.p.Done():
		default:
			p.stopping.Store(true)
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].started.Before(out[j].started) })
	return out
}

// restartPrograms starts again, under their own ids, programs that ended
// with b's container, once it runs again; they wait for the accessibility
// bus of the desktop they start as they did at first. A program that cannot
// start is logged.
func (s *Service) restartPrograms(ctx context.Context, b *box, progs []*proc) {
	if len(progs) == 0 {
		return
	}
	b.desktopStart.Store(0)
	b.a11ySettled.Store(false)
	for _, p := range progs {
		select {
		case <-p.p.Done():
		case <-time.After(10 * time.Second):
			// The container did not go (its delete failed): the program
			// still runs.
			continue
		}
		if _, err := s.startProcessAs(ctx, p.req, p.id); err != nil {
			s.log.WarnContext(ctx, "a program did not start again with its container", "session_id", b.id, "process_id", p.id, "argv0", p.argv[0], "err", err)
			continue
		}
		s.log.InfoContext(ctx, "program started again with its container", "session_id", b.id, "process_id", p.id, "argv0", p.argv[0])
	}
}
