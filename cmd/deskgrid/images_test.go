package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestEndToEndImagesCLI imports a `docker save` tarball, lists and inspects
// it, starts a session from it, commits the session as a new image, and
// deletes the first, through the CLI against `deskgrid up`.
func TestEndToEndImagesCLI(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	run := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(deskgridBinary(t), args...)
		cmd.Env = append(os.Environ(), "DESKGRID_ADDR="+p.grpc, "DESKGRID_DATA_DIR="+p.dataDir)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		code := 0
		if err := cmd.Run(); err != nil {
			code = cliExit(err)
		}
		return out.String(), errb.String(), code
	}
	must := func(args ...string) string {
		t.Helper()
		out, errs, code := run(args...)
		if code != 0 {
			t.Fatalf("deskgrid %v: exit %d\n%s%s", args, code, out, errs)
		}
		return out
	}

	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	_ = tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "etc/motd", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	_, _ = tw.Write([]byte("hi\n"))
	_ = tw.Close()
	lb := layer.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(lb)), nil }, tarball.WithMediaType(types.DockerLayer))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "cli.tar")
	tag, _ := name.NewTag("team/cli:v1")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}

	// Its progress, written to a pipe, is lines, not a line redrawn in place.
	if out, errs, code := run("images", "import", archive); code != 0 || !strings.Contains(out, "docker.io/team/cli:v1") ||
		!strings.Contains(errs, "importing "+archive) || strings.Contains(errs, "\r") {
		t.Fatalf("import: exit %d\n%s%q", code, out, errs)
	}
	if out := must("images", "list"); !strings.Contains(out, "docker.io/team/cli:v1") {
		t.Fatalf("list: %q", out)
	}
	// One machine is one node: -node is ignored, -all-nodes imports onto it.
	if out := must("images", "import", "-node", "elsewhere", "-tag", "team/cli:node", archive); !strings.Contains(out, "docker.io/team/cli:node") {
		t.Fatalf("import -node: %q", out)
	}
	if out := must("images", "import", "-all-nodes", "-tag", "team/cli:every", archive); !strings.Contains(out, "imported onto 1 of 1 nodes") ||
		!strings.Contains(out, "docker.io/team/cli:every") {
		t.Fatalf("import -all-nodes: %q", out)
	}
	want, _ := img.Digest()
	if out := must("images", "inspect", "team/cli:v1"); !strings.Contains(out, want.String()) {
		t.Fatalf("inspect: %q", out)
	}
	out := must("sessions", "create", "-image", "team/cli:v1", "-o", "json")
	var sess struct {
		ID          string `json:"id"`
		ImageDigest string `json:"imageDigest"`
	}
	_ = json.Unmarshal([]byte(out), &sess)
	id := sess.ID
	if id == "" || sess.ImageDigest != want.String() {
		t.Fatalf("create from the image: %q", out)
	}
	if out := must("sessions", "commit", id, "team/cli:v2"); !strings.HasPrefix(out, "IMAGE") || !strings.Contains(out, "docker.io/team/cli:v2") {
		t.Fatalf("commit: %q", out)
	}
	must("sessions", "delete", id)
	must("images", "rm", "team/cli:v1")
	if _, _, code := run("images", "inspect", "team/cli:v1"); code == 0 {
		t.Fatal("inspect found a deleted image")
	}
	if out := must("images", "inspect", "team/cli:v2"); !strings.Contains(out, "sha256:") {
		t.Fatalf("inspect the commit: %q", out)
	}
	if _, errs, code := run("images", "pull", "127.0.0.1:1/nobody/here:v1"); code == 0 || !strings.Contains(errs, "unreachable") {
		t.Fatalf("pull from nowhere: exit %d %q", code, errs)
	}
	if _, _, code := run("images", "pull", "Not A Ref"); code == 0 {
		t.Fatal("a malformed reference was pulled")
	}
	// One machine is one node: -all-nodes reports it, and fails with it.
	if out, errs, code := run("images", "pull", "-all-nodes", "127.0.0.1:1/nobody/here:v1"); code == 0 || !strings.Contains(errs, "unreachable") ||
		!strings.Contains(out, "pulled onto 0 of 1 nodes, failed on 1") {
		t.Fatalf("pull -all-nodes from nowhere: exit %d\n%s%s", code, out, errs)
	}
}

// Progress not on a terminal is a line at most every progressEvery however
// often it comes, and nothing is left to end.
func TestProgressOffATerminal(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b)
	for i := range 1000 {
		p.show("importing %d", i)
	}
	p.done()
	if b.String() != "importing 0\n" {
		t.Fatalf("progress wrote %q", b.String())
	}
}
