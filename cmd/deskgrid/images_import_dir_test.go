package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
)

// archiveImages keeps the archive an import streams.
type archiveImages struct {
	imagev1.UnimplementedImageServiceServer
	mu      sync.Mutex
	archive []byte
}

func (a *archiveImages) ImportImage(stream grpc.ClientStreamingServer[imagev1.ImportImageRequest, imagev1.ImportImageResponse]) error {
	var buf bytes.Buffer
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		buf.Write(m.GetChunk())
	}
	a.mu.Lock()
	a.archive = buf.Bytes()
	a.mu.Unlock()
	return stream.SendAndClose(&imagev1.ImportImageResponse{Images: []*imagev1.Image{{Ref: "docker.io/t/layout:v1"}}})
}

// `images import` takes an OCI layout directory (what `images build -o`
// writes) as well as an archive: it sends the layout as a tar.
func TestImagesImportLayoutDirectory(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rec := &archiveImages{}
	imagev1.RegisterImageServiceServer(srv, rec)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	t.Setenv("DESKGRID_API_KEY", "dg_0000000000000000_test")

	dir := t.TempDir()
	files := map[string]string{
		"oci-layout":          `{"imageLayoutVersion":"1.0.0"}`,
		"index.json":          `{"schemaVersion":2,"manifests":[]}`,
		"blobs/sha256/abcdef": "blob",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	if err := runImages(context.Background(), []string{"import", "-addr", lis.Addr().String(), "-o", "json", dir}, &out, &errb); err != nil {
		t.Fatalf("images import DIR: %v\n%s", err, errb.String())
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(rec.archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the archive sent: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			got[strings.TrimPrefix(h.Name, "./")] = string(b)
		}
	}
	for name, content := range files {
		if got[name] != content {
			t.Errorf("the archive sent holds %s = %q, want %q (all: %v)", name, got[name], content, got)
		}
	}

	// A directory that is no layout is refused, saying what is wanted.
	err = runImages(context.Background(), []string{"import", "-addr", lis.Addr().String(), t.TempDir()}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "oci-layout") {
		t.Errorf("images import of a directory without a layout: %v", err)
	}
}
