package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// runFiles reads and writes a session's files.
func runFiles(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := newCLI(ctx, "files", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	defer c.close()
	const usage = "files <session> ls [dir] | cat PATH | put LOCAL REMOTE | get REMOTE LOCAL | rm PATH | mkdir PATH | mv FROM TO"
	if len(c.pos) < 2 {
		return usageError("%s", usage)
	}
	id, verb, a := c.pos[0], c.pos[1], c.pos[2:]
	sb := sandboxv1.NewSandboxServiceClient(c.conn)
	arg := func(i int) (string, error) {
		if i >= len(a) {
			return "", usageError("%s", usage)
		}
		return a[i], nil
	}
	switch verb {
	case "ls":
		dir := ""
		if len(a) > 0 {
			dir = a[0]
		}
		resp, err := sb.ListFiles(c.ctx, &sandboxv1.ListFilesRequest{SessionId: id, Path: dir})
		if err != nil {
			return rpcError(err)
		}
		return c.table("NAME\tSIZE\tMODE\tMODIFIED", toMsgs(resp.GetFiles()), func(m proto.Message) string {
			f := m.(*sandboxv1.FileInfo)
			name := f.GetName()
			if f.GetIsDir() {
				name += "/"
			}
			return fmt.Sprintf("%s\t%d\t%o\t%s", name, f.GetSize(), f.GetMode(), ago(f.GetModifyTime()))
		})
	case "cat":
		p, err := arg(0)
		if err != nil {
			return err
		}
		st, err := sb.DownloadFile(c.ctx, &sandboxv1.DownloadFileRequest{SessionId: id, Path: p})
		if err != nil {
			return rpcError(err)
		}
		return copyDownload(st, stdout)
	case "get":
		remote, err := arg(0)
		if err != nil {
			return err
		}
		local, err := arg(1)
		if err != nil {
			return err
		}
		st, err := sb.DownloadFile(c.ctx, &sandboxv1.DownloadFileRequest{SessionId: id, Path: remote})
		if err != nil {
			return rpcError(err)
		}
		tmp := local + ".part"
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		if err := copyDownload(st, f); err != nil {
			f.Close()
			os.Remove(tmp)
			return err
		}
		if err := f.Close(); err != nil {
			os.Remove(tmp)
			return err
		}
		return os.Rename(tmp, local)
	case "put":
		local, err := arg(0)
		if err != nil {
			return err
		}
		remote, err := arg(1)
		if err != nil {
			return err
		}
		return upload(c, sb, id, local, remote)
	case "rm":
		p, err := arg(0)
		if err != nil {
			return err
		}
		_, err = sb.DeleteFile(c.ctx, &sandboxv1.DeleteFileRequest{SessionId: id, Path: p})
		return rpcError(err)
	case "mkdir":
		p, err := arg(0)
		if err != nil {
			return err
		}
		_, err = sb.MakeDirectory(c.ctx, &sandboxv1.MakeDirectoryRequest{SessionId: id, Path: p})
		return rpcError(err)
	case "mv":
		from, err := arg(0)
		if err != nil {
			return err
		}
		to, err := arg(1)
		if err != nil {
			return err
		}
		_, err = sb.MoveFile(c.ctx, &sandboxv1.MoveFileRequest{SessionId: id, FromPath: from, ToPath: to})
		return rpcError(err)
	}
	return usageError("%s", usage)
}

func copyDownload(st grpc.ServerStreamingClient[sandboxv1.DownloadFileResponse], w io.Writer) error {
	return receive(st, func(m *sandboxv1.DownloadFileResponse) error {
		_, err := w.Write(m.GetChunk())
		return err
	})
}

// receive hands each message of a server stream to each until the stream
// ends; a failed receive is the CLI's error for the call, each's error is
// returned as it is.
func receive[M any](st grpc.ServerStreamingClient[M], each func(*M) error) error {
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return rpcError(err)
		}
		if err := each(m); err != nil {
			return err
		}
	}
}

// upload streams a local file, showing progress for large ones.
func upload(c *cli, sb sandboxv1.SandboxServiceClient, id, local, remote string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	st, err := sb.UploadFile(c.ctx)
	if err != nil {
		return rpcError(err)
	}
	if err := st.Send(&sandboxv1.UploadFileRequest{Data: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SessionId: id, Path: remote, Mode: uint32(fi.Mode().Perm())}}}); err != nil {
		return rpcError(err)
	}
	buf := make([]byte, 256<<10)
	var sent int64
	r := bufio.NewReader(f)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if serr := st.Send(&sandboxv1.UploadFileRequest{Data: &sandboxv1.UploadFileRequest_Chunk{Chunk: buf[:n]}}); serr != nil {
				_, rerr := st.CloseAndRecv()
				return rpcError(errors.Join(serr, rerr))
			}
			sent += int64(n)
			if fi.Size() > 8<<20 {
				fmt.Fprintf(c.errw, "\ruploading %s: %d%%", local, sent*100/fi.Size())
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if fi.Size() > 8<<20 {
		fmt.Fprintln(c.errw)
	}
	_, err = st.CloseAndRecv()
	return rpcError(err)
}
