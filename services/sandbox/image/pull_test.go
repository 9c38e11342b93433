package image

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"google.golang.org/grpc/codes"
)

// startRegistry serves an in-process OCI registry on loopback; refuse, when
// set, answers every request for a path starting with it with that status.
func startRegistry(t *testing.T, refuse map[string]int) string {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for prefix, code := range refuse {
			if strings.HasPrefix(r.URL.Path, prefix) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				_, _ = w.Write([]byte(`{"errors":[{"code":"DENIED","message":"no"}]}`))
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func push(t *testing.T, ref string, img v1.Image) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
}

func TestPullFromRegistry(t *testing.T) {
	ctx := context.Background()
	host := startRegistry(t, map[string]int{"/v2/private/": http.StatusUnauthorized, "/v2/broken/": http.StatusInternalServerError})
	s, _ := newStore(t)
	img := simpleImage(t)
	push(t, host+"/team/desk:v1", img)

	var prog []Progress
	got, err := s.Pull(ctx, "acme", host+"/team/desk:v1", func(p Progress) { prog = append(prog, p) })
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if got.Digest != want.String() || got.Ref != host+"/team/desk:v1" || len(got.Layers) != 2 {
		t.Fatalf("pulled %+v", got)
	}
	last := prog[len(prog)-1]
	if prog[0].Phase != "resolving" || last.Phase != "done" || last.Done != last.Total || last.Total == 0 || last.LayersDone != 2 {
		t.Fatalf("progress %+v", prog)
	}
	mustRead(t, filepath.Join(got.Layers[1], "home/readme.txt"), "second layer\n")
	if _, err := s.Resolve(ctx, "acme", host+"/team/desk:v1"); err != nil {
		t.Fatal(err)
	}
	// A second pull finds every layer on the node.
	if _, err := s.Pull(ctx, "acme", host+"/team/desk:v1", nil); err != nil {
		t.Fatal(err)
	}
	// By digest.
	byDigest, err := s.Pull(ctx, "other", host+"/team/desk@"+want.String(), nil)
	if err != nil || byDigest.Digest != want.String() {
		t.Fatalf("pull by digest: %+v %v", byDigest, err)
	}
	if _, err := s.Resolve(ctx, "other", want.String()); err != nil {
		t.Fatalf("resolve by digest after a pull by digest: %v", err)
	}

	// A multi-platform index: this node's image is picked.
	otherArch := "arm64"
	if runtime.GOARCH == "arm64" {
		otherArch = "amd64"
	}
	foreign := makeImage(t, otherArch, layerTar(t, entry{name: "arch", body: otherArch}))
	native := makeImage(t, runtime.GOARCH, layerTar(t, entry{name: "arch", body: runtime.GOARCH}))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: foreign, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: otherArch}}},
		mutate.IndexAddendum{Add: native, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}})
	r, _ := name.ParseReference(host + "/multi/arch:v1")
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
	m, err := s.Pull(ctx, "acme", host+"/multi/arch:v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, filepath.Join(m.Layers[0], "arch"), runtime.GOARCH)

	onlyForeign := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: foreign, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: otherArch}}})
	r, _ = name.ParseReference(host + "/multi/foreign:v1")
	if err := remote.WriteIndex(r, onlyForeign); err != nil {
		t.Fatal(err)
	}
	push(t, host+"/single/foreign:v1", foreign)

	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()

	layers, _ := os.ReadDir(s.layers)
	blobs, _ := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
	for _, tc := range []struct {
		name, ref string
		code      codes.Code
	}{
		{"unknown tag", host + "/team/desk:nope", codes.NotFound},
		{"unknown repository", host + "/nobody/here:v1", codes.NotFound},
		{"malformed reference", host + "/Team/Desk:v1", codes.InvalidArgument},
		{"bare digest", want.String(), codes.InvalidArgument},
		{"index without this platform", host + "/multi/foreign:v1", codes.FailedPrecondition},
		{"image for another platform", host + "/single/foreign:v1", codes.FailedPrecondition},
		{"registry refusing", host + "/private/desk:v1", codes.FailedPrecondition},
		{"registry failing", host + "/broken/desk:v1", codes.Unavailable},
		{"registry unreachable", dead + "/team/desk:v1", codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Pull(ctx, "acme", tc.ref, nil)
			wantCode(t, err, tc.code)
			assertNothingLeft(t, s, len(layers), len(blobs))
		})
	}
}

// TestPullCanceledLeavesNothing cancels a pull mid-layer.
func TestPullCanceledLeavesNothing(t *testing.T) {
	host := startRegistry(t, nil)
	s, _ := newStore(t)
	big := make([]byte, 8<<20)
	img := makeImage(t, runtime.GOARCH, layerTar(t, entry{name: "big", body: string(big)}))
	push(t, host+"/big/img:v1", img)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := s.Pull(ctx, "acme", host+"/big/img:v1", func(p Progress) {
		if p.Phase == "fetching" && p.Done > 0 {
			cancel()
		}
	})
	if err == nil {
		t.Fatal("canceled pull succeeded")
	}
	assertNothingLeft(t, s, 0, 0)
	if l, _ := s.List(context.Background(), "acme"); len(l) != 0 {
		t.Fatalf("listed %v", l)
	}
}
