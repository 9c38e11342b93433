package deskgrid

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// Display describes the session's X display: its size, depth and windows.
func (s *Session) Display(ctx context.Context) (*displayv1.Display, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.display.GetDisplay(ctx, &displayv1.GetDisplayRequest{SessionId: s.GetId()})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetDisplay(), nil
}

// Resize changes the size of the session's screen; windows stay open and
// screenshots and input follow the new size. A size the X server cannot
// take is ErrFailedPrecondition.
func (s *Session) Resize(ctx context.Context, width, height int) (*displayv1.Display, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.display.ResizeDisplay(ctx, &displayv1.ResizeDisplayRequest{SessionId: s.GetId(), Width: int32(width), Height: int32(height)})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetDisplay(), nil
}

// Sandbox describes the session's sandbox: its image, limits and usage.
func (s *Session) Sandbox(ctx context.Context) (*sandboxv1.Sandbox, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.sandbox.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SessionId: s.GetId()})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetSandbox(), nil
}

// Processes lists the programs started on the session's desktop (its
// autostart programs), running or ended.
func (s *Session) Processes(ctx context.Context) ([]*sandboxv1.Process, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.sandbox.ListProcesses(ctx, &sandboxv1.ListProcessesRequest{SessionId: s.GetId()})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetProcesses(), nil
}

// ShellResult is what a command in the session's persistent shell printed.
type ShellResult struct {
	Output    []byte
	ExitCode  int
	TimedOut  bool
	Truncated bool
}

// Shell runs a command in the session's persistent shell: its directory and
// exported variables carry over to the next command. timeout 0 is the
// server's default.
func (s *Session) Shell(ctx context.Context, command string, timeout time.Duration) (*ShellResult, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	req := &sandboxv1.RunShellRequest{SessionId: s.GetId(), Command: command}
	if timeout > 0 {
		req.Timeout = durationpb.New(timeout)
	}
	resp, err := s.c.sandbox.RunShell(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return &ShellResult{Output: resp.GetOutput(), ExitCode: int(resp.GetExitCode()), TimedOut: resp.GetTimedOut(), Truncated: resp.GetTruncated()}, nil
}

// RestartShell ends the session's shell; the next Shell starts afresh.
func (s *Session) RestartShell(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := s.c.sandbox.RestartShell(ctx, &sandboxv1.RestartShellRequest{SessionId: s.GetId()})
	return wrap(err)
}

// Changes lists what the session added, modified and deleted compared with
// its image, under path ("" for everything).
func (s *Session) Changes(ctx context.Context, path string) ([]*sandboxv1.Change, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.sandbox.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: s.GetId(), Path: path})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetChanges(), nil
}

// Diff returns a changed file's unified diff against its image.
func (s *Session) Diff(ctx context.Context, path string) (*sandboxv1.DiffFileResponse, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.sandbox.DiffFile(ctx, &sandboxv1.DiffFileRequest{SessionId: s.GetId(), Path: path})
	return resp, wrap(err)
}

// ApplyChanges writes the session's changes into its workspace folder (the
// given paths, or every change when none is given); a file that changed in
// the workspace meanwhile is left alone and reported as a conflict.
func (s *Session) ApplyChanges(ctx context.Context, paths ...string) (*sandboxv1.ApplyChangesResponse, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.sandbox.ApplyChanges(ctx, &sandboxv1.ApplyChangesRequest{SessionId: s.GetId(), Paths: paths})
	return resp, wrap(err)
}

// DiscardChanges drops the session's changes to the given paths (every
// change when none is given), so the image shows through again, and returns
// the paths put back. It is refused while processes run in the sandbox.
func (s *Session) DiscardChanges(ctx context.Context, paths ...string) ([]string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.sandbox.DiscardChanges(ctx, &sandboxv1.DiscardChangesRequest{SessionId: s.GetId(), Paths: paths})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetDiscarded(), nil
}

// CreateSnapshot saves the session's filesystem as it is now.
func (s *Session) CreateSnapshot(ctx context.Context) (*sandboxv1.Snapshot, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.sandbox.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SessionId: s.GetId()})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetSnapshot(), nil
}

// Snapshots lists the session's snapshots.
func (s *Session) Snapshots(ctx context.Context) ([]*sandboxv1.Snapshot, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.sandbox.ListSnapshots(ctx, &sandboxv1.ListSnapshotsRequest{SessionId: s.GetId()})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetSnapshots(), nil
}

// RestoreSnapshot puts the session's filesystem back as the snapshot saved it.
func (s *Session) RestoreSnapshot(ctx context.Context, snapshotID string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := s.c.sandbox.RestoreSnapshot(ctx, &sandboxv1.RestoreSnapshotRequest{SessionId: s.GetId(), SnapshotId: snapshotID})
	return wrap(err)
}

// DeleteSnapshot deletes one of the session's snapshots.
func (s *Session) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := s.c.sandbox.DeleteSnapshot(ctx, &sandboxv1.DeleteSnapshotRequest{SessionId: s.GetId(), SnapshotId: snapshotID})
	return wrap(err)
}

// Stat describes one path.
func (f *Files) Stat(ctx context.Context, path string) (*sandboxv1.FileInfo, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := f.s.c.sandbox.StatFile(ctx, &sandboxv1.StatFileRequest{SessionId: f.s.GetId(), Path: path})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetFile(), nil
}

// Mkdir makes a directory (mode 0 means 0755), and its missing parents
// when parents is true.
func (f *Files) Mkdir(ctx context.Context, path string, mode uint32, parents bool) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := f.s.c.sandbox.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SessionId: f.s.GetId(), Path: path, Mode: mode, Parents: parents})
	return wrap(err)
}

// Move renames from to to; an existing to is replaced only with overwrite.
func (f *Files) Move(ctx context.Context, from, to string, overwrite bool) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := f.s.c.sandbox.MoveFile(ctx, &sandboxv1.MoveFileRequest{SessionId: f.s.GetId(), FromPath: from, ToPath: to, Overwrite: overwrite})
	return wrap(err)
}

// Delete removes a file, or a directory (with what it holds when recursive).
func (f *Files) Delete(ctx context.Context, path string, recursive bool) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := f.s.c.sandbox.DeleteFile(ctx, &sandboxv1.DeleteFileRequest{SessionId: f.s.GetId(), Path: path, Recursive: recursive})
	return wrap(err)
}

// Download streams a file of any size into w and returns its description.
// ctx bounds the whole transfer.
func (f *Files) Download(ctx context.Context, path string, w io.Writer) (*sandboxv1.FileInfo, error) {
	st, err := f.s.c.sandbox.DownloadFile(ctx, &sandboxv1.DownloadFileRequest{SessionId: f.s.GetId(), Path: path})
	if err != nil {
		return nil, wrap(err)
	}
	var info *sandboxv1.FileInfo
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			if info == nil {
				return nil, &Error{Code: 14, Message: "download stream ended without the file's description"}
			}
			return info, nil
		}
		if err != nil {
			return nil, wrap(err)
		}
		switch d := m.GetData().(type) {
		case *sandboxv1.DownloadFileResponse_Info:
			info = d.Info
		case *sandboxv1.DownloadFileResponse_Chunk:
			if _, err := w.Write(d.Chunk); err != nil {
				return nil, err
			}
		}
	}
}
