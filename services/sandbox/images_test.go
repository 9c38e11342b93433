package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
)

// testImage is a one-layer image holding /etc/hello.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "etc/hello", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6})
	_, _ = tw.Write([]byte("hello\n"))
	_ = tw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), l)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImageServiceAndImageSandboxes imports an image over the gRPC image
// service, creates a sandbox from it (the image pinned while it lives),
// commits the sandbox's changes as a new image, and checks every error code.
func TestImageServiceAndImageSandboxes(t *testing.T) {
	ctx := context.Background()
	store, err := image.New(ctx, image.Deps{Dir: filepath.Join(t.TempDir(), "images"), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, testConfig(t), Deps{Images: store})
	is, err := NewImageServer(ImageDeps{Store: store, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	conn := serveImages(t, is)
	images := imagev1.NewImageServiceClient(conn)

	var archive bytes.Buffer
	tag, _ := name.NewTag("team/base:v1")
	if err := tarball.Write(tag, testImage(t), &archive); err != nil {
		t.Fatal(err)
	}
	up, err := images.ImportImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	must(t, up.Send(&imagev1.ImportImageRequest{Data: &imagev1.ImportImageRequest_Header{Header: &imagev1.ImportImageHeader{}}}))
	data := archive.Bytes()
	for len(data) > 0 {
		n := min(len(data), 32<<10)
		must(t, up.Send(&imagev1.ImportImageRequest{Data: &imagev1.ImportImageRequest_Chunk{Chunk: data[:n]}}))
		data = data[n:]
	}
	res, err := up.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GetImages()) != 1 || res.GetImages()[0].GetRef() != "docker.io/team/base:v1" || len(res.GetImages()[0].GetLayers()) != 1 {
		t.Fatalf("import: %v", res)
	}
	list, err := images.ListImages(ctx, &imagev1.ListImagesRequest{})
	if err != nil || len(list.GetImages()) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}

	sb, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "from-image", Image: "team/base:v1"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.GetSandbox().GetImageDigest() != res.GetImages()[0].GetDigest() {
		t.Fatalf("sandbox image digest %q", sb.GetSandbox().GetImageDigest())
	}
	// Deleting the tag keeps the image the sandbox runs.
	if _, err := images.DeleteImage(ctx, &imagev1.DeleteImageRequest{Ref: "team/base:v1"}); err != nil {
		t.Fatal(err)
	}
	if u, _ := images.GetImageUsage(ctx, &imagev1.GetImageUsageRequest{}); u.GetImages() != 1 || u.GetPinnedBytes() == 0 {
		t.Fatalf("usage while pinned: %v", u)
	}

	_, err = h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "from-image", Path: "note.txt", Content: []byte("made in the session")})
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.client.CommitSandbox(ctx, &sandboxv1.CommitSandboxRequest{SessionId: "from-image", Image: "team/derived:v1"})
	if err != nil {
		t.Fatal(err)
	}
	derived, err := images.GetImage(ctx, &imagev1.GetImageRequest{Ref: "team/derived:v1"})
	if err != nil || derived.GetImage().GetDigest() != c.GetDigest() || len(derived.GetImage().GetLayers()) != 2 {
		t.Fatalf("derived: %v %v", derived, err)
	}
	im, err := store.Resolve(ctx, "", "team/derived:v1")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	_ = filepath.Walk(im.Layers[1], func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); string(b) == "made in the session" {
				found = true
			}
		}
		return nil
	})
	if !found {
		t.Fatal("the committed layer lacks the session's file")
	}

	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "from-image"}); err != nil {
		t.Fatal(err)
	}
	if u, _ := images.GetImageUsage(ctx, &imagev1.GetImageUsageRequest{}); u.GetImages() != 1 || u.GetPinnedBytes() != 0 {
		t.Fatalf("usage after delete (only the derived image left): %v", u)
	}

	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"create from a malformed reference", func() error {
			_, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "bad-ref", Image: "Not A Ref"})
			return err
		}, codes.InvalidArgument},
		{"get an unknown tag", func() error {
			_, err := images.GetImage(ctx, &imagev1.GetImageRequest{Ref: "team/none:v1"})
			return err
		}, codes.NotFound},
		{"import junk", func() error {
			up, err := images.ImportImage(ctx)
			if err != nil {
				return err
			}
			_ = up.Send(&imagev1.ImportImageRequest{Data: &imagev1.ImportImageRequest_Header{Header: &imagev1.ImportImageHeader{}}})
			_ = up.Send(&imagev1.ImportImageRequest{Data: &imagev1.ImportImageRequest_Chunk{Chunk: []byte("not an archive at all")}})
			_, err = up.CloseAndRecv()
			return err
		}, codes.InvalidArgument},
		{"commit with a digest for a name", func() error {
			_, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "plain"})
			if err != nil {
				return err
			}
			defer h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "plain"})
			_, err = h.client.CommitSandbox(ctx, &sandboxv1.CommitSandboxRequest{SessionId: "plain", Image: c.GetDigest()})
			return err
		}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
		})
	}
	if _, err := h.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SessionId: "bad-ref"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a failed create left a sandbox: %v", err)
	}
}

func serveImages(t *testing.T, is *ImageServer) *grpc.ClientConn {
	t.Helper()
	return grpcservertest.Serve(t, is.Register, grpcservertest.Options{Bufconn: true})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
