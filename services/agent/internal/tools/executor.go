// Package tools carries out the tool calls a model makes: the computer tool
// on the session's display (decoded by services/platform/computeruse), bash
// and the text editor in its sandbox. It talks to display and sandbox only
// through their gRPC clients.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/platform/computeruse"
	"github.com/deskgrid/deskgrid/services/platform/errinfo"
)

// Executor runs one run's tool calls on its session.
type Executor struct {
	Display   displayv1.DisplayServiceClient
	Sandbox   sandboxv1.SandboxServiceClient
	SessionID string
	// Scale maps model coordinates to the display; DisplayW/H are filled
	// from the display on first use when zero.
	Scale computeruse.Scale
	// LeaseToken returns the fencing token for input; nil sends none.
	LeaseToken func() int64
	// BashTimeout bounds one command; 0 means 2 minutes.
	BashTimeout time.Duration
	// MaxOutput bounds the text returned to the model; 0 means 32 KiB.
	MaxOutput int
	// Settle is how the screenshot after an action waits for its effect;
	// nil uses the display's defaults.
	Settle *displayv1.Settle
	// AccessibilityTree gives the model the session's accessibility tree
	// as text beside each screenshot an action returns (Result.Tree).
	AccessibilityTree bool
	// Home is where the sandbox's files appear to the session's programs;
	// the editor takes absolute paths beneath it. Empty means DefaultHome.
	Home string
	// WholeRoot says the sandbox's files are its programs' whole file
	// system (a session on an image), not their home: the editor then
	// takes any absolute path, and relative ones beneath the home. Left
	// false, it is learnt from the sandbox on the editor's first use.
	WholeRoot bool

	mu   sync.Mutex
	undo map[string][][]byte
	// rootKnown says WholeRoot has been settled.
	rootKnown bool
}

// Result is what a tool call produced.
type Result struct {
	Text    string
	Image   *provider.Image
	IsError bool
	// Width and Height of Image.
	Width, Height int
	// Tree is the accessibility tree as text beside Image, with
	// Executor.AccessibilityTree.
	Tree string
}

// ErrStaleLease is returned when the display refused input for an old lease.
var ErrStaleLease = errors.New("input lease lost")

// Run executes call. Errors the model can correct come back as an error
// Result; a returned error means the run cannot go on (cancelled, lease lost).
func (e *Executor) Run(ctx context.Context, call *provider.ToolCall) (Result, error) {
	var (
		r   Result
		err error
	)
	switch call.Name {
	case provider.ToolComputer:
		r, err = e.computer(ctx, call)
	case provider.ToolBash:
		r, err = e.bash(ctx, call.Input)
	case provider.ToolEditor:
		r, err = e.edit(ctx, call.Input)
	default:
		return Result{Text: fmt.Sprintf("unknown tool %q", call.Name), IsError: true}, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		if errinfo.Reason(err) == errinfo.StaleInputLease {
			return Result{}, fmt.Errorf("%w: %v", ErrStaleLease, status.Convert(err).Message())
		}
		if s, ok := status.FromError(err); ok {
			return Result{Text: s.Message(), IsError: true}, nil
		}
		return Result{Text: err.Error(), IsError: true}, nil
	}
	if max := e.maxOutput(); len(r.Text) > max {
		r.Text = r.Text[:max] + "\n[output truncated]"
	}
	return r, nil
}

func (e *Executor) maxOutput() int {
	if e.MaxOutput > 0 {
		return e.MaxOutput
	}
	return 32 << 10
}

func (e *Executor) ensureSize(ctx context.Context) error {
	if e.Scale.DisplayW > 0 {
		return nil
	}
	d, err := e.Display.GetDisplay(ctx, &displayv1.GetDisplayRequest{SessionId: e.SessionID})
	if err != nil {
		return err
	}
	e.Scale.DisplayW, e.Scale.DisplayH = int(d.GetDisplay().GetWidth()), int(d.GetDisplay().GetHeight())
	if e.Scale.ModelW == 0 {
		e.Scale.ModelW, e.Scale.ModelH = e.Scale.DisplayW, e.Scale.DisplayH
	}
	return nil
}

// DisplaySize returns the display's size, asking the display once.
func (e *Executor) DisplaySize(ctx context.Context) (int, int, error) {
	if err := e.ensureSize(ctx); err != nil {
		return 0, 0, err
	}
	return e.Scale.DisplayW, e.Scale.DisplayH, nil
}

// scaleTo is the size the display scales screenshots and coordinates to,
// nil when the model sees the screen as it is.
func (e *Executor) scaleTo() *displayv1.Size {
	if e.Scale.ModelW <= 0 || e.Scale.ModelH <= 0 || (e.Scale.ModelW == e.Scale.DisplayW && e.Scale.ModelH == e.Scale.DisplayH) {
		return nil
	}
	return &displayv1.Size{Width: int32(e.Scale.ModelW), Height: int32(e.Scale.ModelH)}
}

// modelScale maps the model's coordinates to the space the display is
// asked in: the model's own pixels when the display scales (only Gemini's
// 0-999 grid needs mapping), the screen's otherwise.
func (e *Executor) modelScale() computeruse.Scale {
	sc := e.Scale
	if e.scaleTo() != nil {
		sc.DisplayW, sc.DisplayH = sc.ModelW, sc.ModelH
	}
	return sc
}

func (e *Executor) computer(ctx context.Context, call *provider.ToolCall) (Result, error) {
	if err := e.ensureSize(ctx); err != nil {
		return Result{}, err
	}
	sc := e.modelScale()
	plan, err := computeruse.Decode(call.Dialect, call.Input, sc)
	if err != nil {
		return Result{Text: err.Error(), IsError: true}, nil
	}
	scaleTo := e.scaleTo()
	req := plan.Request(&displayv1.Size{Width: int32(sc.ModelW), Height: int32(sc.ModelH)})
	req.SessionId, req.ScaleTo, req.Settle = e.SessionID, scaleTo, e.Settle
	var shot *displayv1.ScreenshotResponse
	var cursor *displayv1.Point
	if len(req.Actions) > 0 || plan.CursorOnly {
		if e.LeaseToken != nil {
			req.LeaseToken = e.LeaseToken()
		}
		resp, err := e.Display.PerformActions(ctx, req)
		if err != nil {
			return Result{}, err
		}
		shot, cursor = resp.GetScreenshot(), resp.GetCursor()
		if plan.Zoom != nil {
			if imgs := resp.GetImages(); len(imgs) > 0 {
				shot = imgs[len(imgs)-1]
			}
		}
	}
	if plan.CursorOnly {
		x, y := sc.ToModel(cursor)
		return Result{Text: fmt.Sprintf("X=%d,Y=%d", x, y)}, nil
	}
	if shot == nil || len(shot.GetData()) == 0 {
		shot, err = e.Display.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: e.SessionID, Format: displayv1.ImageFormat_IMAGE_FORMAT_PNG, ScaleTo: scaleTo})
		if err != nil {
			return Result{}, err
		}
	}
	r, err := e.screenshotResult(shot, plan.Zoom != nil)
	if err == nil && r.Image != nil && plan.Zoom == nil && e.AccessibilityTree {
		r.Tree = e.accessibilityTree(ctx)
	}
	return r, err
}

// Screenshot returns the screen as the model sees it.
func (e *Executor) Screenshot(ctx context.Context) (Result, error) {
	if err := e.ensureSize(ctx); err != nil {
		return Result{}, err
	}
	shot, err := e.Display.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: e.SessionID, Format: displayv1.ImageFormat_IMAGE_FORMAT_PNG, ScaleTo: e.scaleTo()})
	if err != nil {
		return Result{}, err
	}
	return e.screenshotResult(shot, false)
}

// screenshotResult returns the display's image; a display that did not
// scale it (one without scale_to) gets it scaled here.
func (e *Executor) screenshotResult(shot *displayv1.ScreenshotResponse, zoom bool) (Result, error) {
	w, h := int(shot.GetWidth()), int(shot.GetHeight())
	data := shot.GetData()
	if !zoom && e.Scale.ModelW > 0 && (w != e.Scale.ModelW || h != e.Scale.ModelH) {
		var err error
		if data, err = scalePNG(data, nil, e.Scale.ModelW, e.Scale.ModelH); err != nil {
			return Result{Text: err.Error(), IsError: true}, nil
		}
		w, h = e.Scale.ModelW, e.Scale.ModelH
	}
	ct := shot.GetContentType()
	if ct == "" {
		ct = "image/png"
	}
	return Result{Image: &provider.Image{MediaType: ct, Data: data}, Width: w, Height: h}, nil
}

type bashInput struct {
	Command string `json:"command"`
	Restart bool   `json:"restart"`
}

func (e *Executor) bash(ctx context.Context, raw json.RawMessage) (Result, error) {
	var in bashInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return Result{Text: "bash input is not valid JSON", IsError: true}, nil
	}
	if in.Restart {
		if _, err := e.Sandbox.RestartShell(ctx, &sandboxv1.RestartShellRequest{SessionId: e.SessionID}); err != nil && status.Code(err) != codes.Unimplemented {
			return Result{}, err
		}
		return Result{Text: "tool has been restarted."}, nil
	}
	if strings.TrimSpace(in.Command) == "" {
		return Result{Text: "command is required", IsError: true}, nil
	}
	timeout := e.BashTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	// The session's persistent shell keeps the working directory and
	// variables between calls, as the bash tool promises the model.
	resp, err := e.Sandbox.RunShell(ctx, &sandboxv1.RunShellRequest{SessionId: e.SessionID, Command: in.Command, Timeout: durationpb.New(timeout)})
	if status.Code(err) == codes.Unimplemented {
		return e.bashExec(ctx, in.Command, timeout)
	}
	if err != nil {
		return Result{}, err
	}
	r := Result{Text: string(resp.GetOutput())}
	if resp.GetTruncated() {
		r.Text += "\n[output truncated]"
	}
	switch {
	case resp.GetTimedOut():
		r.Text += fmt.Sprintf("\n[timed out after %s; the shell was restarted and its state lost]", timeout)
		r.IsError = true
	case resp.GetExitCode() != 0:
		r.Text += fmt.Sprintf("\n[exit code %d]", resp.GetExitCode())
		r.IsError = true
	}
	return r, nil
}

// bashExec runs one command in a fresh shell, for a sandbox without the
// persistent shell.
func (e *Executor) bashExec(ctx context.Context, command string, timeout time.Duration) (Result, error) {
	stream, err := e.Sandbox.Exec(ctx, &sandboxv1.ExecRequest{SessionId: e.SessionID, Argv: []string{"bash", "-lc", command}, Timeout: durationpb.New(timeout)})
	if err != nil {
		return Result{}, err
	}
	var out strings.Builder
	var exit *sandboxv1.ExecExit
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Result{}, err
		}
		switch o := m.GetOutput().(type) {
		case *sandboxv1.ExecResponse_Stdout:
			if out.Len() < e.maxOutput()+1 {
				out.Write(o.Stdout)
			}
		case *sandboxv1.ExecResponse_Stderr:
			if out.Len() < e.maxOutput()+1 {
				out.Write(o.Stderr)
			}
		case *sandboxv1.ExecResponse_Exit:
			exit = o.Exit
		}
	}
	r := Result{Text: out.String()}
	switch {
	case exit == nil:
	case exit.GetTimedOut():
		r.Text += fmt.Sprintf("\n[timed out after %s]", timeout)
		r.IsError = true
	case exit.GetExitCode() != 0:
		r.Text += fmt.Sprintf("\n[exit code %d]", exit.GetExitCode())
		r.IsError = true
	}
	return r, nil
}
