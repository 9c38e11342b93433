package metrics

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// Notes are facts only the handler of a call knows (a warm display, a
// cached image, a pull from a registry). The handler sets them as gRPC
// trailers named trailerPrefix+key, with nothing but grpc-go: the
// interceptor here reads them for the call's own metric, and the caller's
// client interceptor for its own (a create's). Display and sandbox set them
// with literal names; they link no telemetry.
const (
	NoteWarm          = "warm"
	NoteImageCached   = "image-cached"
	NoteImagePull     = "image-pull"       // "ok" or "failed": the call pulled its image
	NoteImagePullSize = "image-pull-bytes" // compressed bytes of that image
	trailerPrefix     = "deskgrid-metric-"
)

var noteKeys = []string{NoteWarm, NoteImageCached}

// notes collects what a call learned about itself.
type notes struct {
	mu sync.Mutex
	kv map[string]string
	// create: the node calls made under this context are a create's phases.
	create bool
}

type notesKey struct{}

// take keeps the notes among a trailer's keys.
func (n *notes) take(md metadata.MD) {
	for k, v := range md {
		if key, ok := strings.CutPrefix(k, trailerPrefix); ok && len(v) > 0 {
			n.set(key, v[0])
		}
	}
}

// trailerCapture sees the trailers a handler sets.
type trailerCapture struct {
	grpc.ServerTransportStream
	n *notes
}

func (t trailerCapture) SetTrailer(md metadata.MD) error {
	t.n.take(md)
	return t.ServerTransportStream.SetTrailer(md)
}

// withNotes returns ctx carrying n, with the handler's trailers captured.
func withNotes(ctx context.Context, n *notes) context.Context {
	ctx = context.WithValue(ctx, notesKey{}, n)
	if sts := grpc.ServerTransportStreamFromContext(ctx); sts != nil {
		ctx = grpc.NewContextWithServerTransportStream(ctx, trailerCapture{sts, n})
	}
	return ctx
}

func (n *notes) set(k, v string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kv == nil {
		n.kv = map[string]string{}
	}
	n.kv[k] = v
}

func (n *notes) get(k string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if v, ok := n.kv[k]; ok {
		return v
	}
	return "unknown"
}

// recorder records one RPC's metric from its request, response and error.
type recorder func(ctx context.Context, n *notes, req, resp any, err error, d time.Duration)

var unaryRecorders = map[string]recorder{
	sessionv1.SessionService_CreateSession_FullMethodName: func(ctx context.Context, n *notes, _, _ any, err error, d time.Duration) {
		sessionCreate.Record(ctx, secs(d), attrs("outcome", Outcome(err), "image_cached", n.get(NoteImageCached), "warm", n.get(NoteWarm)))
	},
	displayv1.DisplayService_CreateDisplay_FullMethodName: func(ctx context.Context, n *notes, _, _ any, err error, d time.Duration) {
		displayCreate.Record(ctx, secs(d), attrs("outcome", Outcome(err), "warm", n.get(NoteWarm)))
	},
	sandboxv1.SandboxService_CreateSandbox_FullMethodName: func(ctx context.Context, n *notes, _, _ any, err error, d time.Duration) {
		sandboxCreate.Record(ctx, secs(d), attrs("outcome", Outcome(err), "image_cached", n.get(NoteImageCached)))
		n.recordPull(ctx)
	},
	displayv1.DisplayService_Screenshot_FullMethodName: func(ctx context.Context, _ *notes, req, resp any, err error, d time.Duration) {
		format := "png"
		if r, ok := req.(*displayv1.ScreenshotRequest); ok && r.GetFormat() == displayv1.ImageFormat_IMAGE_FORMAT_JPEG {
			format = "jpeg"
		}
		screenshot.Record(ctx, secs(d), attrs("format", format, "outcome", Outcome(err)))
		if r, ok := resp.(*displayv1.ScreenshotResponse); ok && err == nil {
			screenshotB.Add(ctx, int64(len(r.GetData())))
		}
	},
	displayv1.DisplayService_PerformActions_FullMethodName: func(ctx context.Context, _ *notes, _, resp any, err error, d time.Duration) {
		settle := "none"
		if r, ok := resp.(*displayv1.PerformActionsResponse); ok && err == nil {
			if r.GetSettle() != nil {
				settle = strings.ToLower(strings.TrimPrefix(r.GetSettle().GetOutcome().String(), "SETTLE_OUTCOME_"))
			}
			if s := r.GetScreenshot(); s != nil {
				screenshotB.Add(ctx, int64(len(s.GetData())))
			}
		}
		actions.Record(ctx, secs(d), attrs("outcome", Outcome(err), "settle", settle))
	},
	sandboxv1.SandboxService_RunShell_FullMethodName: func(ctx context.Context, _ *notes, _, resp any, err error, d time.Duration) {
		o := Outcome(err)
		if r, ok := resp.(*sandboxv1.RunShellResponse); ok && err == nil {
			o = exitOutcome(r.GetExitCode(), "", r.GetTimedOut())
		}
		execDur.Record(ctx, secs(d), attrs("kind", "shell", "outcome", o))
	},
}

// exitOutcome classes a command's end: ok, nonzero, signal, timed_out.
func exitOutcome(code int32, signal string, timedOut bool) string {
	switch {
	case timedOut:
		return "timed_out"
	case signal != "":
		return "signal"
	case code != 0:
		return "nonzero"
	}
	return "ok"
}

// UnaryServerInterceptor records the domain metrics of the unary RPCs that
// have one and sends the handler's notes back as trailers.
func UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		rec, ok := unaryRecorders[info.FullMethod]
		if !ok {
			return handler(ctx, req)
		}
		n := &notes{create: info.FullMethod == sessionv1.SessionService_CreateSession_FullMethodName}
		ctx = withNotes(ctx, n)
		start := time.Now()
		resp, err := handler(ctx, req)
		// Recorded even when the caller went away: the work was done.
		rec(context.WithoutCancel(ctx), n, req, resp, err, time.Since(start))
		return resp, err
	}
}

// recordPull counts the pull from a registry the call noted, if any.
func (n *notes) recordPull(ctx context.Context) {
	n.mu.Lock()
	outcome, ok := n.kv[NoteImagePull]
	size, _ := strconv.ParseInt(n.kv[NoteImagePullSize], 10, 64)
	n.mu.Unlock()
	if !ok {
		return
	}
	if outcome != "ok" {
		outcome = "failed"
	}
	imagePulls.Add(ctx, 1, attrs("outcome", outcome))
	if outcome == "ok" && size > 0 {
		imagePullB.Add(ctx, size)
	}
}

// StreamServerInterceptor records Exec (its duration and how the command
// ended, read from the last message it sends) and PullImage.
func StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		switch info.FullMethod {
		case sandboxv1.SandboxService_Exec_FullMethodName, imagev1.ImageService_PullImage_FullMethodName:
		default:
			return handler(srv, ss)
		}
		n := &notes{}
		w := &recordedStream{ServerStream: ss, ctx: withNotes(ss.Context(), n), n: n}
		start := time.Now()
		err := handler(srv, w)
		ctx := context.WithoutCancel(ss.Context())
		if info.FullMethod == imagev1.ImageService_PullImage_FullMethodName {
			n.recordPull(ctx)
			return err
		}
		o := Outcome(err)
		if err == nil && w.exit != nil {
			o = exitOutcome(w.exit.GetExitCode(), w.exit.GetSignal(), w.exit.GetTimedOut())
		}
		execDur.Record(ctx, secs(time.Since(start)), attrs("kind", "exec", "outcome", o))
		return err
	}
}

type recordedStream struct {
	grpc.ServerStream
	ctx  context.Context
	n    *notes
	exit *sandboxv1.ExecExit
}

func (s *recordedStream) Context() context.Context { return s.ctx }

func (s *recordedStream) SetTrailer(md metadata.MD) {
	s.n.take(md)
	s.ServerStream.SetTrailer(md)
}

func (s *recordedStream) SendMsg(m any) error {
	if r, ok := m.(*sandboxv1.ExecResponse); ok && r.GetExit() != nil {
		s.exit = r.GetExit()
	}
	return s.ServerStream.SendMsg(m)
}

// createPhases names the node calls a create makes.
var createPhases = map[string]string{
	sandboxv1.SandboxService_CreateSandbox_FullMethodName: "sandbox",
	displayv1.DisplayService_CreateDisplay_FullMethodName: "display",
	displayv1.DisplayService_Screenshot_FullMethodName:    "first_screenshot",
	sandboxv1.SandboxService_StartProcess_FullMethodName:  "desktop",
}

// UnaryClientInterceptor times the node calls a CreateSession makes as its
// phases and takes up the notes the node sent back (a warm display, a
// cached image) for the create's own metric. Other calls pass untouched.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		n, ok := ctx.Value(notesKey{}).(*notes)
		phase := createPhases[method]
		if !ok || !n.create || phase == "" {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		var tr metadata.MD
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&tr))...)
		sessionCreatePhase.Record(context.WithoutCancel(ctx), secs(time.Since(start)), attrs("phase", phase, "outcome", Outcome(err)))
		for _, k := range noteKeys {
			if v := tr.Get(trailerPrefix + k); len(v) > 0 {
				if b, perr := strconv.ParseBool(v[0]); perr == nil {
					n.set(k, strconv.FormatBool(b))
				}
			}
		}
		return err
	}
}
