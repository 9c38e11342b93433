package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

func (h *harness) upload(t *testing.T, id, path string, data []byte, chunk int) (*sandboxv1.UploadFileResponse, error) {
	t.Helper()
	st, err := h.client.UploadFile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sandboxv1.UploadFileRequest{Data: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SessionId: id, Path: path, Mode: 0o600}}}); err != nil {
		return nil, err
	}
	for len(data) > 0 {
		n := min(chunk, len(data))
		if err := st.Send(&sandboxv1.UploadFileRequest{Data: &sandboxv1.UploadFileRequest_Chunk{Chunk: data[:n]}}); err != nil {
			break // the server ended the call; CloseAndRecv says why
		}
		data = data[n:]
	}
	return st.CloseAndRecv()
}

func (h *harness) download(t *testing.T, id, path string) (*sandboxv1.FileInfo, []byte, error) {
	t.Helper()
	st, err := h.client.DownloadFile(context.Background(), &sandboxv1.DownloadFileRequest{SessionId: id, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var info *sandboxv1.FileInfo
	var buf bytes.Buffer
	for {
		msg, err := st.Recv()
		if err == io.EOF {
			return info, buf.Bytes(), nil
		}
		if err != nil {
			return nil, nil, err
		}
		if msg.GetInfo() != nil {
			info = msg.GetInfo()
		}
		buf.Write(msg.GetChunk())
	}
}

func TestUploadDownloadAndFileOperations(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	sb := h.create(t, "fs", "")
	ctx := context.Background()
	big := make([]byte, 5<<20+123)
	_, _ = rand.Read(big)
	up, err := h.upload(t, "fs", "dir/big.bin", big, 64<<10)
	if err != nil || up.GetFile().GetSize() != int64(len(big)) || up.GetFile().GetMode() != 0o600 {
		t.Fatalf("upload: %v %v", up, err)
	}
	info, got, err := h.download(t, "fs", "dir/big.bin")
	if err != nil || !bytes.Equal(got, big) || info.GetSize() != int64(len(big)) {
		t.Fatalf("download: %d bytes, info %v, %v", len(got), info, err)
	}
	st, err := h.client.StatFile(ctx, &sandboxv1.StatFileRequest{SessionId: "fs", Path: "dir"})
	if err != nil || !st.GetFile().GetIsDir() {
		t.Fatalf("stat: %v %v", st, err)
	}

	mk := func(p string, parents bool) error {
		_, err := h.client.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SessionId: "fs", Path: p, Parents: parents, Mode: 0o700})
		return err
	}
	if err := mk("a/b/c", true); err != nil {
		t.Fatal(err)
	}
	if err := mk("a/b/c", true); err != nil {
		t.Fatalf("mkdir -p existing: %v", err)
	}
	wantCode(t, mk("a/b/c", false), codes.AlreadyExists)
	wantCode(t, mk("x/y", false), codes.NotFound)

	mv := func(from, to string, overwrite bool) error {
		_, err := h.client.MoveFile(ctx, &sandboxv1.MoveFileRequest{SessionId: "fs", FromPath: from, ToPath: to, Overwrite: overwrite})
		return err
	}
	if _, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "fs", Path: "one", Content: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "fs", Path: "two", Content: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, mv("one", "two", false), codes.AlreadyExists)
	if err := mv("one", "two", true); err != nil {
		t.Fatal(err)
	}
	if err := mv("two", "a/b/c/moved", false); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(sb.GetRootDir(), "a/b/c/moved")); string(data) != "1" {
		t.Fatalf("moved file holds %q", data)
	}

	del := func(p string, recursive bool) error {
		_, err := h.client.DeleteFile(ctx, &sandboxv1.DeleteFileRequest{SessionId: "fs", Path: p, Recursive: recursive})
		return err
	}
	wantCode(t, del("a", false), codes.FailedPrecondition)
	if err := del("a", true); err != nil {
		t.Fatal(err)
	}
	wantCode(t, del("a", true), codes.NotFound)
	wantCode(t, del("", true), codes.InvalidArgument)

	// Nothing leaves the sandbox through a symlink or "..".
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(sb.GetRootDir(), "out")); err != nil {
		t.Fatal(err)
	}
	_, _, err = h.download(t, "fs", "out/secret")
	wantCode(t, err, codes.PermissionDenied)
	_, err = h.upload(t, "fs", "out/new", []byte("x"), 1)
	wantCode(t, err, codes.PermissionDenied)
	wantCode(t, mv("out/secret", "stolen", false), codes.PermissionDenied)
	wantCode(t, del("out/secret", false), codes.PermissionDenied)
	_, _, err = h.download(t, "fs", "../etc/passwd")
	wantCode(t, err, codes.InvalidArgument)
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Fatalf("outside file touched: %v", err)
	}

	// An upload without a header is refused, and leaves nothing behind.
	stream, err := h.client.UploadFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&sandboxv1.UploadFileRequest{Data: &sandboxv1.UploadFileRequest_Chunk{Chunk: []byte("x")}})
	_, err = stream.CloseAndRecv()
	wantCode(t, err, codes.InvalidArgument)
}
