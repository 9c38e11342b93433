package sandbox

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// server is the gRPC edge: it turns requests into Service calls and errors
// into status codes, once (toStatus, errors.go).
type server struct {
	sandboxv1.UnimplementedSandboxServiceServer
	s *Service
}

func (b *box) proto() *sandboxv1.Sandbox {
	out := &sandboxv1.Sandbox{
		SessionId:   b.id,
		LowerDir:    b.lower,
		RootDir:     b.merged(),
		Driver:      b.driver.Name(),
		CreateTime:  timestamppb.New(b.created),
		Frozen:      b.isFrozen(),
		Disk:        b.disk,
		Network:     b.network,
		Image:       b.image,
		ImageDigest: b.imageDigest,
		Desktop:     b.img != nil && b.img.Config.Labels[SessionLabel] != "",
	}
	if b.cg != nil {
		out.Limits = b.limits.proto()
		out.Cgroup = b.cg.Version()
	} else {
		out.Limits = (&Limits{DiskBytes: b.limits.DiskBytes}).proto()
	}
	return out
}

func (g *server) CreateSandbox(ctx context.Context, req *sandboxv1.CreateSandboxRequest) (*sandboxv1.CreateSandboxResponse, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, g.s.toStatus(ctx, "create sandbox", err)
	}
	if b := g.s.claimWarm(ctx, req); b != nil {
		return &sandboxv1.CreateSandboxResponse{Sandbox: b.proto(), DesktopStarted: true}, nil
	}
	im, err := g.s.sandboxImage(ctx, req.GetSessionId(), req.GetImage())
	if err != nil {
		return nil, g.s.toStatus(ctx, "create sandbox", err)
	}
	b, err := g.s.create(ctx, req.GetSessionId(), req.GetWorkspace(), Limits{
		MemoryBytes: req.GetMemoryBytes(), CPUMillis: req.GetCpuMillis(), Pids: req.GetPids(), DiskBytes: req.GetDiskBytes(),
	}, req.GetSnapshotId(), req.GetNetwork(), im)
	if err != nil {
		if im != nil {
			_ = g.s.images.Unpin(req.GetSessionId())
		}
		return nil, g.s.toStatus(ctx, "create sandbox", err)
	}
	return &sandboxv1.CreateSandboxResponse{Sandbox: b.proto()}, nil
}

func (g *server) GetSandbox(ctx context.Context, req *sandboxv1.GetSandboxRequest) (*sandboxv1.GetSandboxResponse, error) {
	b, err := g.s.lookup(ctx, req.GetSessionId())
	if err != nil {
		return nil, g.s.toStatus(ctx, "get sandbox", err)
	}
	sb := b.proto()
	sb.Usage = g.s.usage(b)
	return &sandboxv1.GetSandboxResponse{Sandbox: sb}, nil
}

func (g *server) ListSandboxes(ctx context.Context, _ *sandboxv1.ListSandboxesRequest) (*sandboxv1.ListSandboxesResponse, error) {
	boxes := g.s.list(ctx)
	sort.Slice(boxes, func(i, j int) bool { return boxes[i].id < boxes[j].id })
	out := make([]*sandboxv1.Sandbox, 0, len(boxes))
	for _, b := range boxes {
		out = append(out, b.proto())
	}
	return &sandboxv1.ListSandboxesResponse{Sandboxes: out}, nil
}

func (g *server) DeleteSandbox(ctx context.Context, req *sandboxv1.DeleteSandboxRequest) (*sandboxv1.DeleteSandboxResponse, error) {
	_, lookupErr := g.s.lookup(ctx, req.GetSessionId())
	if err := g.s.deleteSandbox(ctx, req.GetSessionId()); err != nil {
		return nil, g.s.toStatus(ctx, "delete sandbox", err)
	}
	// Only the owner's delete releases the image (another tenant's finds nothing).
	if g.s.images != nil && lookupErr == nil {
		if err := g.s.images.Unpin(req.GetSessionId()); err != nil {
			g.s.log.WarnContext(ctx, "unpin the sandbox's image", "session_id", req.GetSessionId(), "error", err)
		}
	}
	return &sandboxv1.DeleteSandboxResponse{}, nil
}

func (g *server) Exec(req *sandboxv1.ExecRequest, stream grpc.ServerStreamingServer[sandboxv1.ExecResponse]) error {
	ctx := stream.Context()
	exit, err := g.s.exec(ctx, req, func(out *sandboxv1.ExecResponse) error { return stream.Send(out) })
	if err != nil {
		return g.s.toStatus(ctx, "exec", err)
	}
	return stream.Send(&sandboxv1.ExecResponse{Output: &sandboxv1.ExecResponse_Exit{Exit: exit}})
}

func (g *server) ReadFile(ctx context.Context, req *sandboxv1.ReadFileRequest) (*sandboxv1.ReadFileResponse, error) {
	data, mode, err := g.s.readFile(ctx, req.GetSessionId(), req.GetPath())
	if err != nil {
		return nil, g.s.toStatus(ctx, "read file", err)
	}
	return &sandboxv1.ReadFileResponse{Content: data, Mode: uint32(mode)}, nil
}

func (g *server) WriteFile(ctx context.Context, req *sandboxv1.WriteFileRequest) (*sandboxv1.WriteFileResponse, error) {
	if err := g.s.writeFile(ctx, req.GetSessionId(), req.GetPath(), req.GetContent(), fs.FileMode(req.GetMode())); err != nil {
		return nil, g.s.toStatus(ctx, "write file", err)
	}
	return &sandboxv1.WriteFileResponse{}, nil
}

func (g *server) ListFiles(ctx context.Context, req *sandboxv1.ListFilesRequest) (*sandboxv1.ListFilesResponse, error) {
	infos, err := g.s.listFiles(ctx, req.GetSessionId(), req.GetPath())
	if err != nil {
		return nil, g.s.toStatus(ctx, "list files", err)
	}
	out := make([]*sandboxv1.FileInfo, 0, len(infos))
	for _, fi := range infos {
		out = append(out, fileInfo(fi))
	}
	return &sandboxv1.ListFilesResponse{Files: out}, nil
}

func (g *server) StartProcess(ctx context.Context, req *sandboxv1.StartProcessRequest) (*sandboxv1.StartProcessResponse, error) {
	p, err := g.s.startProcess(ctx, req)
	if err != nil {
		return nil, g.s.toStatus(ctx, "start process", err)
	}
	return &sandboxv1.StartProcessResponse{Process: p}, nil
}

func (g *server) StopProcess(ctx context.Context, req *sandboxv1.StopProcessRequest) (*sandboxv1.StopProcessResponse, error) {
	p, err := g.s.stopProcess(ctx, req.GetSessionId(), req.GetProcessId())
	if err != nil {
		return nil, g.s.toStatus(ctx, "stop process", err)
	}
	return &sandboxv1.StopProcessResponse{Process: p}, nil
}

func (g *server) ListProcesses(ctx context.Context, req *sandboxv1.ListProcessesRequest) (*sandboxv1.ListProcessesResponse, error) {
	ps, err := g.s.listProcesses(ctx, req.GetSessionId())
	if err != nil {
		return nil, g.s.toStatus(ctx, "list processes", err)
	}
	return &sandboxv1.ListProcessesResponse{Processes: ps}, nil
}

func (g *server) FreezeSandbox(ctx context.Context, req *sandboxv1.FreezeSandboxRequest) (*sandboxv1.FreezeSandboxResponse, error) {
	if err := g.s.freeze(ctx, req.GetSessionId(), true); err != nil {
		return nil, g.s.toStatus(ctx, "freeze sandbox", err)
	}
	return &sandboxv1.FreezeSandboxResponse{}, nil
}

func (g *server) ThawSandbox(ctx context.Context, req *sandboxv1.ThawSandboxRequest) (*sandboxv1.ThawSandboxResponse, error) {
	if err := g.s.freeze(ctx, req.GetSessionId(), false); err != nil {
		return nil, g.s.toStatus(ctx, "thaw sandbox", err)
	}
	return &sandboxv1.ThawSandboxResponse{}, nil
}

func (g *server) ListChanges(ctx context.Context, req *sandboxv1.ListChangesRequest) (*sandboxv1.ListChangesResponse, error) {
	list, err := g.s.listChanges(ctx, req.GetSessionId(), req.GetPath())
	if err != nil {
		return nil, g.s.toStatus(ctx, "list changes", err)
	}
	out := make([]*sandboxv1.Change, 0, len(list))
	for _, c := range list {
		out = append(out, changeProto(c))
	}
	return &sandboxv1.ListChangesResponse{Changes: out}, nil
}

func (g *server) DiffFile(ctx context.Context, req *sandboxv1.DiffFileRequest) (*sandboxv1.DiffFileResponse, error) {
	resp, err := g.s.diffFile(ctx, req.GetSessionId(), req.GetPath())
	if err != nil {
		return nil, g.s.toStatus(ctx, "diff file", err)
	}
	return resp, nil
}

func (g *server) ApplyChanges(ctx context.Context, req *sandboxv1.ApplyChangesRequest) (*sandboxv1.ApplyChangesResponse, error) {
	applied, conflicts, err := g.s.applyChanges(ctx, req.GetSessionId(), req.GetPaths())
	if err != nil {
		return nil, g.s.toStatus(ctx, "apply changes", err)
	}
	return &sandboxv1.ApplyChangesResponse{Applied: applied, Conflicts: conflicts}, nil
}

func (g *server) DiscardChanges(ctx context.Context, req *sandboxv1.DiscardChangesRequest) (*sandboxv1.DiscardChangesResponse, error) {
	discarded, err := g.s.discardChanges(ctx, req.GetSessionId(), req.GetPaths())
	if err != nil {
		return nil, g.s.toStatus(ctx, "discard changes", err)
	}
	return &sandboxv1.DiscardChangesResponse{Discarded: discarded}, nil
}

func (g *server) CreateSnapshot(ctx context.Context, req *sandboxv1.CreateSnapshotRequest) (*sandboxv1.CreateSnapshotResponse, error) {
	m, err := g.s.createSnapshot(ctx, req.GetSessionId())
	if err != nil {
		return nil, g.s.toStatus(ctx, "create snapshot", err)
	}
	return &sandboxv1.CreateSnapshotResponse{Snapshot: m.proto()}, nil
}

func (g *server) ListSnapshots(ctx context.Context, req *sandboxv1.ListSnapshotsRequest) (*sandboxv1.ListSnapshotsResponse, error) {
	list, err := g.s.listSnapshots(ctx, req.GetSessionId())
	if err != nil {
		return nil, g.s.toStatus(ctx, "list snapshots", err)
	}
	out := make([]*sandboxv1.Snapshot, 0, len(list))
	for _, m := range list {
		out = append(out, m.proto())
	}
	return &sandboxv1.ListSnapshotsResponse{Snapshots: out}, nil
}

func (g *server) RestoreSnapshot(ctx context.Context, req *sandboxv1.RestoreSnapshotRequest) (*sandboxv1.RestoreSnapshotResponse, error) {
	if err := g.s.restoreSnapshot(ctx, req.GetSessionId(), req.GetSnapshotId()); err != nil {
		return nil, g.s.toStatus(ctx, "restore snapshot", err)
	}
	return &sandboxv1.RestoreSnapshotResponse{}, nil
}

func (g *server) DeleteSnapshot(ctx context.Context, req *sandboxv1.DeleteSnapshotRequest) (*sandboxv1.DeleteSnapshotResponse, error) {
	if err := g.s.deleteSnapshot(ctx, req.GetSessionId(), req.GetSnapshotId()); err != nil {
		return nil, g.s.toStatus(ctx, "delete snapshot", err)
	}
	return &sandboxv1.DeleteSnapshotResponse{}, nil
}

func (g *server) RunShell(ctx context.Context, req *sandboxv1.RunShellRequest) (*sandboxv1.RunShellResponse, error) {
	res, err := g.s.runShell(ctx, req)
	if err != nil {
		return nil, g.s.toStatus(ctx, "run shell", err)
	}
	return &sandboxv1.RunShellResponse{Output: res.output, ExitCode: int32(res.exitCode), TimedOut: res.timedOut, Truncated: res.truncated}, nil
}

func (g *server) RestartShell(ctx context.Context, req *sandboxv1.RestartShellRequest) (*sandboxv1.RestartShellResponse, error) {
	if err := g.s.restartShell(ctx, req.GetSessionId()); err != nil {
		return nil, g.s.toStatus(ctx, "restart shell", err)
	}
	return &sandboxv1.RestartShellResponse{}, nil
}

func fileInfo(fi fs.FileInfo) *sandboxv1.FileInfo {
	return &sandboxv1.FileInfo{
		Name:       fi.Name(),
		Size:       fi.Size(),
		Mode:       uint32(fi.Mode().Perm()),
		IsDir:      fi.IsDir(),
		ModifyTime: timestamppb.New(fi.ModTime().UTC().Truncate(time.Microsecond)),
	}
}

func (g *server) UploadFile(stream grpc.ClientStreamingServer[sandboxv1.UploadFileRequest, sandboxv1.UploadFileResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return g.s.toStatus(ctx, "upload file", err)
	}
	hdr := first.GetHeader()
	if hdr == nil {
		return status.Error(codes.InvalidArgument, "the first upload message must be the header naming the file")
	}
	fi, err := g.s.upload(ctx, hdr.GetSessionId(), hdr.GetPath(), fs.FileMode(hdr.GetMode()), func() ([]byte, error) {
		msg, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		if msg.GetHeader() != nil {
			return nil, invalidf("only the first upload message may be a header")
		}
		return msg.GetChunk(), nil
	})
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = errUploadEnded
		}
		return g.s.toStatus(ctx, "upload file", err)
	}
	return stream.SendAndClose(&sandboxv1.UploadFileResponse{File: fileInfo(fi)})
}

func (g *server) DownloadFile(req *sandboxv1.DownloadFileRequest, stream grpc.ServerStreamingServer[sandboxv1.DownloadFileResponse]) error {
	ctx := stream.Context()
	err := g.s.download(ctx, req.GetSessionId(), req.GetPath(), func(fi fs.FileInfo) error {
		return stream.Send(&sandboxv1.DownloadFileResponse{Data: &sandboxv1.DownloadFileResponse_Info{Info: fileInfo(fi)}})
	}, func(p []byte) error {
		return stream.Send(&sandboxv1.DownloadFileResponse{Data: &sandboxv1.DownloadFileResponse_Chunk{Chunk: p}})
	})
	if err != nil {
		return g.s.toStatus(ctx, "download file", err)
	}
	return nil
}

func (g *server) StatFile(ctx context.Context, req *sandboxv1.StatFileRequest) (*sandboxv1.StatFileResponse, error) {
	fi, err := g.s.statFile(ctx, req.GetSessionId(), req.GetPath())
	if err != nil {
		return nil, g.s.toStatus(ctx, "stat file", err)
	}
	return &sandboxv1.StatFileResponse{File: fileInfo(fi)}, nil
}

func (g *server) MakeDirectory(ctx context.Context, req *sandboxv1.MakeDirectoryRequest) (*sandboxv1.MakeDirectoryResponse, error) {
	if err := g.s.makeDirectory(ctx, req.GetSessionId(), req.GetPath(), fs.FileMode(req.GetMode()), req.GetParents()); err != nil {
		return nil, g.s.toStatus(ctx, "make directory", err)
	}
	return &sandboxv1.MakeDirectoryResponse{}, nil
}

func (g *server) MoveFile(ctx context.Context, req *sandboxv1.MoveFileRequest) (*sandboxv1.MoveFileResponse, error) {
	if err := g.s.moveFile(ctx, req.GetSessionId(), req.GetFromPath(), req.GetToPath(), req.GetOverwrite()); err != nil {
		return nil, g.s.toStatus(ctx, "move file", err)
	}
	return &sandboxv1.MoveFileResponse{}, nil
}

func (g *server) DeleteFile(ctx context.Context, req *sandboxv1.DeleteFileRequest) (*sandboxv1.DeleteFileResponse, error) {
	if err := g.s.deleteFile(ctx, req.GetSessionId(), req.GetPath(), req.GetRecursive()); err != nil {
		return nil, g.s.toStatus(ctx, "delete file", err)
	}
	return &sandboxv1.DeleteFileResponse{}, nil
}

func (g *server) GetAccessibilityTree(ctx context.Context, req *sandboxv1.GetAccessibilityTreeRequest) (*sandboxv1.GetAccessibilityTreeResponse, error) {
	resp, err := g.s.accessibilityTree(ctx, req)
	if err != nil {
		return nil, g.s.toStatus(ctx, "read the accessibility tree", err)
	}
	return resp, nil
}

func (g *server) ActOnAccessible(ctx context.Context, req *sandboxv1.ActOnAccessibleRequest) (*sandboxv1.ActOnAccessibleResponse, error) {
	resp, err := g.s.actOnAccessible(ctx, req)
	if err != nil {
		return nil, g.s.toStatus(ctx, "act on an accessible node", err)
	}
	return resp, nil
}

func (g *server) ListApplications(ctx context.Context, req *sandboxv1.ListApplicationsRequest) (*sandboxv1.ListApplicationsResponse, error) {
	apps, err := g.s.listApplications(ctx, req.GetSessionId())
	if err != nil {
		return nil, g.s.toStatus(ctx, "list applications", err)
	}
	return &sandboxv1.ListApplicationsResponse{Applications: apps}, nil
}

func (g *server) Open(ctx context.Context, req *sandboxv1.OpenRequest) (*sandboxv1.OpenResponse, error) {
	resp, err := g.s.open(ctx, req)
	if err != nil {
		return nil, g.s.toStatus(ctx, "open", err)
	}
	return resp, nil
}

func (g *server) LaunchApplication(ctx context.Context, req *sandboxv1.LaunchApplicationRequest) (*sandboxv1.LaunchApplicationResponse, error) {
	resp, err := g.s.launchApplication(ctx, req)
	if err != nil {
		return nil, g.s.toStatus(ctx, "launch application", err)
	}
	return resp, nil
}
