package sandbox

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/errinfo"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/fsroot"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
)

// edge is a Service with only what toStatus uses.
func edge() *Service { return &Service{log: quietLogger()} }

// codeOf is the code err becomes at the gRPC edge, and whether err is of a
// kind the edge knows (not masked as Internal).
func codeOf(err error) (codes.Code, bool) {
	c := status.Code(edge().toStatus(context.Background(), "test", err))
	return c, c != codes.Internal && c != codes.Unknown
}

// TestErrorKindsMapToTheirCodes walks the mapping at the edge: every kind
// of error the service returns becomes its own code, with its reason where
// one is given, and keeps its message, bare and wrapped; nothing known
// falls through to Internal or Unknown.
func TestErrorKindsMapToTheirCodes(t *testing.T) {
	type row struct {
		name   string
		err    error
		code   codes.Code
		reason string
		msg    string // the status's message; "" for the error's own
	}
	kinds := []struct {
		name   string
		kind   error
		code   codes.Code
		reason string
	}{
		{"errInvalid", errInvalid, codes.InvalidArgument, ""},
		{"errNoSandbox", errNoSandbox, codes.NotFound, errinfo.SandboxNotFound},
		{"errNotFound", errNotFound, codes.NotFound, ""},
		{"errExists", errExists, codes.AlreadyExists, ""},
		{"errRefused", errRefused, codes.PermissionDenied, ""},
		{"errFrozen", errFrozen, codes.FailedPrecondition, errinfo.SandboxFrozen},
		{"errBusy", errBusy, codes.FailedPrecondition, ""},
		{"errPrecondition", errPrecondition, codes.FailedPrecondition, ""},
		{"errInterrupted", errInterrupted, codes.Aborted, ""},
		{"errClosed", errClosed, codes.Unavailable, ""},
		{"errMissingProgram", errMissingProgram, codes.Unavailable, ""},
		{"errUnavailable", errUnavailable, codes.Unavailable, ""},
		{"errNoRoom", errNoRoom, codes.ResourceExhausted, ""},
		{"errCorrupt", errCorrupt, codes.DataLoss, ""},
		{"errNoAnswer", errNoAnswer, codes.DeadlineExceeded, ""},
		{"errUploadEnded", errUploadEnded, codes.Canceled, ""},
	}
	// Every kind errors.go declares is in the table: a kind cannot be
	// added without saying what it becomes.
	inTable := map[string]bool{}
	for _, k := range kinds {
		inTable[k.name] = true
	}
	for _, name := range declaredKinds(t) {
		if !inTable[name] {
			t.Errorf("kind %s is declared in errors.go but missing from this table", name)
		}
	}

	var rows []row
	for _, k := range kinds {
		rows = append(rows,
			row{k.name, k.kind, k.code, k.reason, ""},
			row{"failf/" + k.name, failf(k.kind, "session %q: %v", "s1", errors.New("why")), k.code, k.reason, `session "s1": why`},
			row{"wrapped/" + k.name, fmt.Errorf("outer: %w", failf(k.kind, "inner")), k.code, k.reason, "outer: inner"},
		)
	}
	rows = append(rows,
		row{"invalidf", invalidf("argv[%d] is empty", 1), codes.InvalidArgument, "", "argv[1] is empty"},
		row{"session id", validateSessionID(""), codes.InvalidArgument, "", "session_id is required"},
		row{"argv", validateArgv(nil), codes.InvalidArgument, "", ""},
		row{"limits", func() error { _, err := (&Service{}).limitsFor(Limits{MemoryBytes: -1}); return err }(), codes.InvalidArgument, "", "memory_bytes -1 is negative"},
		row{"no snapshot", errNoSnapshot("snap-0"), codes.NotFound, "", ""},
		row{"copied snapshot", errCopiedSnapshot("s1"), codes.FailedPrecondition, "", ""},
		// The image store's kinds, through the sandbox's image calls: the
		// store decides the code, the message is the call's.
		row{"image not found", imageErrorf("image %s: %w", "r", image.ErrNotFound), codes.NotFound, "", "image r: not found"},
		row{"image invalid", imageErrorf("image %s: %w", "r", image.ErrInvalid), codes.InvalidArgument, "", ""},
		row{"image precondition", imageErrorf("image %s: %w", "r", image.ErrPrecondition), codes.FailedPrecondition, "", ""},
		row{"image unavailable", imageErrorf("image %s: %w", "r", image.ErrUnavailable), codes.Unavailable, "", ""},
		row{"image disk full", imageErrorf("commit %s: %w", "s1", syscall.ENOSPC), codes.ResourceExhausted, "", "commit s1: no space left on device"},
		row{"image canceled", imageErrorf("image %s: %w", "r", context.Canceled), codes.Canceled, "", "image r: context canceled"},
		// Errors of the packages the service calls.
		row{"anonymous", auth.ErrAnonymous, codes.Unauthenticated, "", status.Convert(auth.ErrAnonymous).Message()},
		row{"lease", errinfo.Error(codes.FailedPrecondition, errinfo.StaleInputLease, "leased"), codes.FailedPrecondition, errinfo.StaleInputLease, "leased"},
		row{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "", "test: deadline exceeded"},
		row{"canceled", context.Canceled, codes.Canceled, "", "test: canceled"},
		row{"no slirp", fmt.Errorf("%w: %w", jail.ErrNoSlirp, fs.ErrNotExist), codes.Unavailable, "", "test: this node cannot give sandboxes network:  is not installed (Debian package slirp4netns)"},
		row{"not regular", fmt.Errorf("%w: d is a directory", fsroot.ErrNotRegular), codes.InvalidArgument, errinfo.NotRegularFile, ""},
		row{"invalid path", fsroot.ErrInvalidPath, codes.InvalidArgument, "", ""},
		row{"not dir", fsroot.ErrNotDir, codes.InvalidArgument, "", ""},
		row{"escape", fsroot.ErrEscape, codes.PermissionDenied, "", "path escapes the sandbox root: symlinks may not lead out of the sandbox home"},
		row{"too large", fsroot.ErrTooLarge, codes.ResourceExhausted, "", ""},
		row{"no file", &fs.PathError{Op: "open", Path: "a/b", Err: fs.ErrNotExist}, codes.NotFound, "", "a/b does not exist in the sandbox"},
		row{"not empty", &fs.PathError{Op: "remove", Path: "d", Err: syscall.ENOTEMPTY}, codes.FailedPrecondition, "", "remove d: directory not empty: the directory is not empty; ask for a recursive delete"},
		row{"exists", &fs.PathError{Op: "mkdir", Path: "d", Err: syscall.EEXIST}, codes.AlreadyExists, "", ""},
		row{"disk full", &fs.PathError{Op: "write", Path: "f", Err: syscall.ENOSPC}, codes.ResourceExhausted, "", "test: the session's disk is full; free space or ask for a larger disk_bytes"},
		row{"quota", syscall.EDQUOT, codes.ResourceExhausted, "", "test: the session's disk is full; free space or ask for a larger disk_bytes"},
	)
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if r.err == nil {
				t.Fatal("no error to map")
			}
			got := edge().toStatus(context.Background(), "test", r.err)
			st := status.Convert(got)
			if st.Code() != r.code {
				t.Fatalf("%v: code %v, want %v", r.err, st.Code(), r.code)
			}
			if reason := errinfo.Reason(got); reason != r.reason {
				t.Fatalf("%v: reason %q, want %q", r.err, reason, r.reason)
			}
			want := r.msg
			if want == "" {
				want = r.err.Error()
			}
			if st.Message() != want {
				t.Fatalf("message %q, want %q", st.Message(), want)
			}
		})
	}

	// What the edge knows nothing of is masked as Internal.
	got := edge().toStatus(context.Background(), "run", fmt.Errorf("a detail of the node: %w", errors.ErrUnsupported))
	if st := status.Convert(got); st.Code() != codes.Internal || st.Message() != "run failed on the node; see its logs" {
		t.Fatalf("unknown error: %v", got)
	}
	if edge().toStatus(context.Background(), "run", nil) != nil {
		t.Fatal("nil error became a status")
	}
}

// TestDiskFullCounted: a full disk is counted among the limit events as it
// is mapped.
func TestDiskFullCounted(t *testing.T) {
	s := edge()
	_ = s.toStatus(context.Background(), "write file", &fs.PathError{Op: "write", Path: "f", Err: syscall.ENOSPC})
	if n := s.LimitEvents().DiskFull; n != 1 {
		t.Fatalf("disk full counted %d times, want 1", n)
	}
}

// declaredKinds are the names of the package-level errors.New sentinels in
// errors.go: the kinds of failure the service returns.
func declaredKinds(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, v := range vs.Values {
				if c, ok := v.(*ast.CallExpr); ok {
					if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "New" {
						names = append(names, vs.Names[i].Name)
					}
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("errors.go declares no kinds")
	}
	return names
}

// TestReasonsReachTheClient: through a real gRPC server, the cases a
// client tells apart carry their reason, and the others carry none.
func TestReasonsReachTheClient(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	ctx := context.Background()
	h.create(t, "why", "")
	check := func(what string, err error, code codes.Code, reason string) {
		t.Helper()
		if status.Code(err) != code || errinfo.Reason(err) != reason {
			t.Errorf("%s: %v (reason %q), want %v with reason %q", what, err, errinfo.Reason(err), code, reason)
		}
	}

	_, err := h.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SessionId: "none"})
	check("GetSandbox of no sandbox", err, codes.NotFound, errinfo.SandboxNotFound)
	_, err = h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "none", Path: "f"})
	check("ReadFile in no sandbox", err, codes.NotFound, errinfo.SandboxNotFound)
	_, err = h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "why", Path: "missing"})
	check("ReadFile of a missing file", err, codes.NotFound, "")

	if _, err := h.client.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SessionId: "why", Path: "d"}); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "why", Path: "d"})
	check("ReadFile of a directory", err, codes.InvalidArgument, errinfo.NotRegularFile)
	_, err = h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "why", Path: "../d"})
	check("ReadFile of a bad path", err, codes.InvalidArgument, "")

	if _, err := h.client.FreezeSandbox(ctx, &sandboxv1.FreezeSandboxRequest{SessionId: "why"}); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.RestartShell(ctx, &sandboxv1.RestartShellRequest{SessionId: "why"})
	check("RestartShell when frozen", err, codes.FailedPrecondition, errinfo.SandboxFrozen)
	if _, err := h.client.ThawSandbox(ctx, &sandboxv1.ThawSandboxRequest{SessionId: "why"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.RestartShell(ctx, &sandboxv1.RestartShellRequest{SessionId: "why"}); err != nil {
		t.Fatalf("RestartShell once thawed: %v", err)
	}
}
