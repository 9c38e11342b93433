package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/errinfo"
)

type editInput struct {
	Command    string  `json:"command"`
	Path       string  `json:"path"`
	FileText   *string `json:"file_text"`
	OldStr     *string `json:"old_str"`
	NewStr     *string `json:"new_str"`
	InsertLine *int    `json:"insert_line"`
	InsertText *string `json:"insert_text"`
	ViewRange  []int   `json:"view_range"`
}

// maxUndo bounds the versions kept per file for undo_edit.
const maxUndo = 10

func (e *Executor) edit(ctx context.Context, raw json.RawMessage) (Result, error) {
	var in editInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return Result{Text: "editor input is not valid JSON", IsError: true}, nil
	}
	if in.Path == "" {
		return Result{Text: "path is required", IsError: true}, nil
	}
	fail := func(format string, a ...any) (Result, error) {
		return Result{Text: fmt.Sprintf(format, a...), IsError: true}, nil
	}
	shown := in.Path
	e.learnRoot(ctx)
	rel, ok := e.relPath(in.Path)
	if !ok {
		return fail("%s is outside the session's files: give a path under %s", in.Path, e.home())
	}
	if rel == "" {
		// The home itself: the sandbox names its root ".".
		rel = "."
	}
	in.Path = rel
	switch in.Command {
	case "view":
		content, ok, err := e.read(ctx, in.Path)
		if err != nil {
			return Result{}, err
		}
		if !ok {
			return e.viewDir(ctx, in.Path)
		}
		lines := strings.Split(string(content), "\n")
		from, to := 1, len(lines)
		if len(in.ViewRange) == 2 {
			from = max(in.ViewRange[0], 1)
			if in.ViewRange[1] != -1 {
				to = min(in.ViewRange[1], len(lines))
			}
			if from > to {
				return fail("view_range %v is outside the file's %d lines", in.ViewRange, len(lines))
			}
		}
		var sb strings.Builder
		for i := from; i <= to; i++ {
			fmt.Fprintf(&sb, "%6d\t%s\n", i, lines[i-1])
		}
		return Result{Text: sb.String()}, nil
	case "create":
		if in.FileText == nil {
			return fail("create needs file_text")
		}
		old, existed, err := e.read(ctx, in.Path)
		if err != nil {
			return Result{}, err
		}
		if err := e.write(ctx, in.Path, []byte(*in.FileText), old, existed); err != nil {
			return Result{}, err
		}
		return Result{Text: "File created successfully at: " + shown}, nil
	case "str_replace":
		if in.OldStr == nil {
			return fail("str_replace needs old_str")
		}
		content, ok, err := e.read(ctx, in.Path)
		if err != nil {
			return Result{}, err
		}
		if !ok {
			return fail("%s does not exist", shown)
		}
		switch n := strings.Count(string(content), *in.OldStr); {
		case *in.OldStr == "" || n == 0:
			return fail("No replacement was performed: old_str did not appear verbatim in %s.", shown)
		case n > 1:
			return fail("No replacement was performed: old_str appears %d times in %s; make it unique.", n, shown)
		}
		newStr := ""
		if in.NewStr != nil {
			newStr = *in.NewStr
		}
		updated := strings.Replace(string(content), *in.OldStr, newStr, 1)
		if err := e.write(ctx, in.Path, []byte(updated), content, true); err != nil {
			return Result{}, err
		}
		return Result{Text: "The file " + shown + " has been edited."}, nil
	case "insert":
		text := in.NewStr
		if in.InsertText != nil {
			text = in.InsertText
		}
		if in.InsertLine == nil || text == nil {
			return fail("insert needs insert_line and new_str")
		}
		content, ok, err := e.read(ctx, in.Path)
		if err != nil {
			return Result{}, err
		}
		if !ok {
			return fail("%s does not exist", shown)
		}
		lines := strings.Split(string(content), "\n")
		at := *in.InsertLine
		if at < 0 || at > len(lines) {
			return fail("insert_line %d is outside [0, %d]", at, len(lines))
		}
		ins := strings.Split(*text, "\n")
		lines = append(lines[:at], append(ins, lines[at:]...)...)
		if err := e.write(ctx, in.Path, []byte(strings.Join(lines, "\n")), content, true); err != nil {
			return Result{}, err
		}
		return Result{Text: "The file " + shown + " has been edited."}, nil
	case "undo_edit":
		e.mu.Lock()
		hist := e.undo[in.Path]
		if len(hist) == 0 {
			e.mu.Unlock()
			return fail("No edit to undo for %s.", shown)
		}
		prev := hist[len(hist)-1]
		e.undo[in.Path] = hist[:len(hist)-1]
		e.mu.Unlock()
		if _, err := e.Sandbox.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: e.SessionID, Path: in.Path, Content: prev, Mode: 0o644}); err != nil {
			return Result{}, err
		}
		return Result{Text: "Last edit to " + shown + " undone."}, nil
	default:
		return fail("unknown editor command %q: use view, create, str_replace, insert or undo_edit", in.Command)
	}
}

// DefaultHome is where a session's files appear to its programs.
const DefaultHome = "/home/user"

func (e *Executor) home() string {
	if e.Home != "" {
		return e.Home
	}
	return DefaultHome
}

// learnRoot asks the sandbox, once, whether its files are a whole file
// system (it runs an image) rather than a home. A sandbox that cannot say
// is taken as a home, and asked again next time.
func (e *Executor) learnRoot(ctx context.Context) {
	e.mu.Lock()
	known := e.rootKnown || e.WholeRoot
	e.mu.Unlock()
	if known {
		return
	}
	sb, err := e.Sandbox.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SessionId: e.SessionID})
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rootKnown = true
	e.WholeRoot = sb.GetSandbox().GetImage() != ""
}

// relPath turns the path a model sent into one relative to the sandbox's
// files. Models send absolute paths (the reference editor tool requires
// them); those beneath the home are taken, others refused. Relative paths
// pass as they are: the sandbox resolves them beneath its root and refuses
// any that climb out.
func (e *Executor) relPath(p string) (string, bool) {
	home := e.home()
	e.mu.Lock()
	whole := e.WholeRoot
	e.mu.Unlock()
	if whole {
		// The files are the whole file system: the sandbox takes absolute
		// paths in the session's own root and relative ones from the
		// session user's home, as a shell there would.
		if !strings.HasPrefix(p, "/") {
			return p, true
		}
		return path.Clean(p), true
	}
	if !strings.HasPrefix(p, "/") {
		return p, true
	}
	clean := path.Clean(p)
	if clean == home {
		return "", true
	}
	rel, ok := strings.CutPrefix(clean, home+"/")
	return rel, ok
}

// read returns a file's content; ok is false when it does not exist or is
// a directory.
func (e *Executor) read(ctx context.Context, path string) ([]byte, bool, error) {
	r, err := e.Sandbox.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: e.SessionID, Path: path})
	if status.Code(err) == codes.NotFound || errinfo.Reason(err) == errinfo.NotRegularFile {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return r.GetContent(), true, nil
}

func (e *Executor) write(ctx context.Context, path string, content, old []byte, existed bool) error {
	if _, err := e.Sandbox.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: e.SessionID, Path: path, Content: content, Mode: 0o644}); err != nil {
		return err
	}
	if existed {
		e.mu.Lock()
		if e.undo == nil {
			e.undo = map[string][][]byte{}
		}
		h := append(e.undo[path], old)
		if len(h) > maxUndo {
			h = h[len(h)-maxUndo:]
		}
		e.undo[path] = h
		e.mu.Unlock()
	}
	return nil
}

func (e *Executor) viewDir(ctx context.Context, path string) (Result, error) {
	r, err := e.Sandbox.ListFiles(ctx, &sandboxv1.ListFilesRequest{SessionId: e.SessionID, Path: path})
	if status.Code(err) == codes.NotFound {
		return Result{Text: path + " does not exist", IsError: true}, nil
	}
	if err != nil {
		return Result{}, err
	}
	var sb strings.Builder
	for _, f := range r.GetFiles() {
		name := f.GetName()
		if f.GetIsDir() {
			name += "/"
		}
		sb.WriteString(name + "\n")
	}
	return Result{Text: sb.String()}, nil
}
