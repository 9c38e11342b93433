package tools

import (
	"context"
	"encoding/json"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/errinfo"
)

func TestEditorPaths(t *testing.T) {
	e := &Executor{}
	for in, want := range map[string]string{
		"/home/user/a.txt":         "a.txt",
		"/home/user/dir/../b.txt":  "b.txt",
		"/home/user":               "",
		"/home/user/":              "",
		"notes/c.txt":              "notes/c.txt",
		"/etc/passwd":              "!",
		"/home/user/../etc/passwd": "!",
		"/home/username/x":         "!",
		"/":                        "!",
	} {
		got, ok := e.relPath(in)
		if !ok {
			got = "!"
		}
		if got != want {
			t.Errorf("relPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// On a session that runs an image the sandbox's files are the whole file
// system: absolute paths are taken as they are, relative ones from the
// home, and the sandbox refuses any that climb out.
func TestEditorPathsOnAnImage(t *testing.T) {
	e := &Executor{WholeRoot: true}
	for in, want := range map[string]string{
		"/home/user/a.txt":   "/home/user/a.txt",
		"/tmp/x/../b.txt":    "/tmp/b.txt",
		"/etc/app.conf":      "/etc/app.conf",
		"notes/c.txt":        "notes/c.txt",
		"/":                  "/",
		"/home/user/../../x": "/x",
	} {
		got, ok := e.relPath(in)
		if !ok || got != want {
			t.Errorf("relPath(%q) = %q %v, want %q", in, got, ok, want)
		}
	}
}

// dirSandbox is a sandbox holding one directory, "notes", and the home
// (".") with it; reading either as a file fails as the sandbox's does:
// with the IS_A_DIRECTORY reason, or, with plainWords, only a message that
// says "directory".
type dirSandbox struct {
	sandboxv1.SandboxServiceClient
	plainWords bool
	listed     []string
}

func (d *dirSandbox) GetSandbox(context.Context, *sandboxv1.GetSandboxRequest, ...grpc.CallOption) (*sandboxv1.GetSandboxResponse, error) {
	return &sandboxv1.GetSandboxResponse{Sandbox: &sandboxv1.Sandbox{}}, nil
}

func (d *dirSandbox) ReadFile(_ context.Context, req *sandboxv1.ReadFileRequest, _ ...grpc.CallOption) (*sandboxv1.ReadFileResponse, error) {
	msg := "not a regular file: " + req.GetPath() + " is a directory"
	if d.plainWords {
		return nil, status.Error(codes.InvalidArgument, msg)
	}
	return nil, errinfo.Error(codes.InvalidArgument, errinfo.NotRegularFile, msg)
}

func (d *dirSandbox) ListFiles(_ context.Context, req *sandboxv1.ListFilesRequest, _ ...grpc.CallOption) (*sandboxv1.ListFilesResponse, error) {
	d.listed = append(d.listed, req.GetPath())
	return &sandboxv1.ListFilesResponse{Files: []*sandboxv1.FileInfo{{Name: "today.md"}, {Name: "old", IsDir: true}}}, nil
}

// The editor views a directory (the home too) by listing it when the
// sandbox's reason says it is one; the wording alone decides nothing.
func TestEditorViewsDirectoriesByReason(t *testing.T) {
	ctx := context.Background()
	sb := &dirSandbox{}
	e := &Executor{Sandbox: sb, SessionID: "s"}
	for path, want := range map[string]string{"/home/user/notes": "notes", "/home/user": "."} {
		r, err := e.edit(ctx, json.RawMessage(`{"command":"view","path":"`+path+`"}`))
		if err != nil || r.IsError || r.Text != "today.md\nold/\n" {
			t.Fatalf("view %s: %+v, %v; want its listing", path, r, err)
		}
		if got := sb.listed[len(sb.listed)-1]; got != want {
			t.Fatalf("view %s listed %q, want %q", path, got, want)
		}
	}
	words := &dirSandbox{plainWords: true}
	e = &Executor{Sandbox: words, SessionID: "s"}
	if _, err := e.edit(ctx, json.RawMessage(`{"command":"view","path":"/home/user/notes"}`)); status.Code(err) != codes.InvalidArgument || len(words.listed) != 0 {
		t.Fatalf("view with a message that only says directory: %v, listed %v; want the sandbox's error", err, words.listed)
	}
}
