package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fakeApt stands for apt-get in the test's base image: it "installs" a
// package by writing a file named after it, and its update leaves a list
// file behind, as apt's does.
const fakeApt = `#!/bin/sh
case "$1" in
update) mkdir -p /var/lib/apt/lists && echo list > /var/lib/apt/lists/deb.example_dists_bookworm_Packages ;;
install) shift; for a in "$@"; do case "$a" in -*) ;; *) echo installed > /usr/share/fake/"$a" ;; esac; done ;;
esac
`

// TestBuildOnAddsOneLayer: a recipe that extends another is built as one
// layer on the other's image, holding only what the recipe adds: its
// packages (installed with the image's own apt, in a chroot), its files, its
// setup's changes (a file it removes is a whiteout), and no trace of the
// build itself (apt's lists, the policy that keeps services from starting,
// the resolver configuration lent for the downloads).
func TestBuildOnAddsOneLayer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("builds on an image as root only (overlay mounts, chroot)")
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("needs a static busybox for the base image (Debian's busybox-static)")
	}
	ctx := context.Background()
	dir := t.TempDir()

	// The base image: busybox, the fake apt-get, a file the setup removes.
	rootfs := filepath.Join(dir, "rootfs")
	// No /dev, as in an image built here (mmdebstrap --skip=output/dev).
	for _, d := range []string{"bin", "usr/bin", "usr/sbin", "usr/share/fake", "etc/dpkg/dpkg.cfg.d", "proc", "var/lib/apt/lists", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	write := func(p, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(rootfs, p), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("bin/busybox", string(bb), 0o755)
	for _, applet := range []string{"sh", "mkdir", "rm", "cat", "echo"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	write("usr/bin/apt-get", fakeApt, 0o755)
	write("etc/old.conf", "old\n", 0o644)
	base := filepath.Join(dir, "base-layout")
	baseImg := layoutOf(t, rootfs, base)

	// The recipes: a base, and one extending it.
	write2 := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write2(filepath.Join(dir, "base/recipe.yaml"), "name: test/base:1\nsuite: bookworm\nconfig:\n  user: \"1000:1000\"\n  env: [A=1]\n")
	write2(filepath.Join(dir, "base/packages"), "basepkg\n")
	write2(filepath.Join(dir, "top/recipe.yaml"), "name: test/top:1\nsuite: bookworm\nextends: ../base\ndpkg_options: [path-exclude=/usr/share/man/*]\nconfig:\n  env: [B=2]\n")
	write2(filepath.Join(dir, "top/packages"), "extra\n")
	write2(filepath.Join(dir, "top/files/etc/motd"), "hello\n")
	write2(filepath.Join(dir, "top/setup.sh"), "rm /etc/old.conf\necho new > /etc/new.conf\ncat /etc/dpkg/dpkg.cfg.d/99deskgrid-top > /etc/seen-dpkg-options\n")
	r, err := Load(filepath.Join(dir, "top"))
	if err != nil {
		t.Fatal(err)
	}

	var progress bytes.Buffer
	b, err := New(Deps{Mmdebstrap: "/bin/false", Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if _, err := b.BuildOn(ctx, r, base, out); err != nil {
		t.Fatalf("BuildOn: %v\n%s", err, progress.String())
	}
	img, err := layoutImage(out)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("layers %d (%v), want the base's and one more", len(layers), err)
	}
	baseLayers, _ := baseImg.Layers()
	d0, _ := layers[0].Digest()
	bd0, _ := baseLayers[0].Digest()
	if d0 != bd0 {
		t.Errorf("first layer %s, want the base's %s", d0, bd0)
	}
	entries := layerEntries(t, layers[1])
	for name, want := range map[string]string{
		"usr/share/fake/extra":  "installed\n",
		"etc/motd":              "hello\n",
		"etc/new.conf":          "new\n",
		"etc/.wh.old.conf":      "",
		"etc/seen-dpkg-options": "path-exclude=/usr/share/man/*\n",
	} {
		got, ok := entries[name]
		if !ok {
			t.Errorf("the new layer lacks %s; it holds %v", name, keys(entries))
		} else if got != want {
			t.Errorf("%s in the new layer: %q, want %q", name, got, want)
		}
	}
	for name := range entries {
		for _, bad := range []string{"var/lib/apt/lists/deb.", "usr/sbin/policy-rc.d", "etc/resolv.conf", "dev", "bin/busybox", "usr/share/fake/basepkg"} {
			if strings.HasPrefix(name, bad) {
				t.Errorf("the new layer holds %s", name)
			}
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "1000:1000" || strings.Join(cf.Config.Env, " ") != "A=1 B=2" {
		t.Errorf("config user %q env %v, want the base's user and both recipes' env", cf.Config.User, cf.Config.Env)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".build-*")); len(left) > 0 {
		t.Errorf("build directories left: %v", left)
	}
}

// layoutOf writes an OCI layout of one layer holding rootfs.
func layoutOf(t *testing.T, rootfs, dst string) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.Walk(rootfs, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == rootfs {
			return err
		}
		rel, _ := filepath.Rel(rootfs, p)
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = rel, 0, 0, "", ""
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.Write(dst, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return img
}

// layerEntries are a layer's paths (no leading ./ or /) and the contents
// of its regular files.
func layerEntries(t *testing.T, l v1.Layer) map[string]string {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/"), "/")
		b, _ := io.ReadAll(tr)
		out[name] = string(b)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
