package imagebuild

import (
	"archive/tar"
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/pkg/archive"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	imagestore "github.com/deskgrid/deskgrid/services/sandbox/image"
)

// layerScript runs in a mount namespace of its own (unshare -m), so every
// mount it makes goes when it ends, whatever way it ends: the base image's
// layers below an overlay, the recipe's packages installed in a chroot on
// it with the image's own apt sources, its files copied over it and its
// setup run in it. What it changed is then the overlay's upper directory.
//
//	$1 lowerdir list  $2 upper  $3 overlay workdir  $4 mount point
//	$5 the recipe's files/ (or empty)  $6 its setup.sh (or empty)
//	$7 dpkg options file name  $8 dpkg options (one a line, or empty)
//	$9... packages
const layerScript = `lower=$1 upper=$2 work=$3 root=$4 files=$5 setup=$6 dpkgcfg=$7 dpkgopts=$8
shift 8
mount --make-rprivate / 2>/dev/null || true
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work,redirect_dir=off,metacopy=off" "$root" 2>/dev/null ||
	mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$root"
# Mount points the image may lack (an image from elsewhere may have no /dev):
# made for the build, gone from the layer after it.
made_mp=
for d in proc dev; do
	if [ ! -d "$root/$d" ]; then mkdir "$root/$d"; made_mp="$made_mp $d"; fi
done
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
rc="$root/etc/resolv.conf" made=
if [ -f "$rc" ] && [ ! -L "$rc" ]; then mount --bind /etc/resolv.conf "$rc"
elif [ ! -e "$rc" ] && [ ! -L "$rc" ]; then cp /etc/resolv.conf "$rc"; made=1; fi
if [ -n "$dpkgopts" ]; then printf '%s\n' "$dpkgopts" > "$root/etc/dpkg/dpkg.cfg.d/$dpkgcfg"; fi
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
echo "apt-get update"
# The image's sources are the build machine's (mmdebstrap wrote them); one
# whose key stayed on the machine fails here while the others update: the
# install below says so if a package is then missing.
chroot "$root" apt-get update -q || echo "apt-get update failed for some sources; going on with the lists it got"
echo "apt-get install $*"
chroot "$root" apt-get install -y -q --no-install-recommends "$@"
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/*_* "$root/usr/sbin/policy-rc.d"
if [ -n "$files" ]; then
	tar -C "$files" --owner=0 --group=0 --numeric-owner --mode=go-w -cf - . | tar -C "$root" --no-overwrite-dir -xpf -
fi
if [ -n "$setup" ]; then chroot "$root" /bin/sh -eu -s < "$setup"; fi
if [ -n "$made" ]; then rm -f "$rc"; else umount "$rc" 2>/dev/null || true; fi
umount "$root/dev" "$root/proc"
for d in $made_mp; do rmdir "$root/$d"; done
umount "$root"
`

// BuildOn builds r as one layer on top of the image in the OCI layout
// base (r.Base's image): the base's layers are unpacked, r's own packages
// installed with apt in a chroot on an overlay over them, r's own files
// copied and its setup run, and the overlay's upper directory becomes the
// new layer; the image config is r's. It needs root (mounts and chroot)
// and writes out as Build does: nothing is left there when it fails.
func (b *Builder) BuildOn(ctx context.Context, r *Recipe, base, out string) (Result, error) {
	start := time.Now()
	if os.Geteuid() != 0 {
		return Result{}, fmt.Errorf("build %s on %s: needs root (overlay mounts and chroot)", r.Name, base)
	}
	if err := checkOut(out); err != nil {
		return Result{}, err
	}
	baseImg, err := layoutImage(base)
	if err != nil {
		return Result{}, fmt.Errorf("build %s: base image: %w", r.Name, err)
	}
	work, err := workDir(r, out)
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work)

	layers, err := baseImg.Layers()
	if err != nil {
		return Result{}, fmt.Errorf("build %s: base image: %w", r.Name, err)
	}
	b.step(start, "building %s on %s: unpacking its %d layer(s)", r.Name, base, len(layers))
	var lowers []string
	for i, l := range layers {
		dir := filepath.Join(work, fmt.Sprintf("lower%d", i))
		if err := unpackLayer(ctx, l, dir); err != nil {
			return Result{}, fmt.Errorf("build %s: base layer %d: %w", r.Name, i, err)
		}
		// overlayfs takes the topmost lower directory first.
		lowers = append([]string{dir}, lowers...)
	}
	upper, ovl, root := filepath.Join(work, "upper"), filepath.Join(work, "ovlwork"), filepath.Join(work, "root")
	for _, d := range []string{upper, ovl, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return Result{}, fmt.Errorf("build %s: %w", r.Name, err)
		}
	}
	b.step(start, "installing %d Debian packages (%s) and the recipe's files and setup", len(r.Own.Packages), strings.Join(r.Own.Packages, " "))
	args := []string{"--mount", "--propagation", "private", "/bin/sh", "-eu", "-c", layerScript, "layer",
		strings.Join(lowers, ":"), upper, ovl, root, r.Own.FileDir, r.Own.Script,
		"99deskgrid-" + filepath.Base(r.Dir), strings.Join(r.Own.DpkgOptions, "\n")}
	args = append(args, r.Own.Packages...)
	if len(r.Own.Packages) == 0 {
		// apt-get install with nothing to install does nothing.
		args = append(args, "apt")
	}
	if err := b.run(ctx, "layer", exec.CommandContext(ctx, "unshare", args...)); err != nil {
		return Result{}, fmt.Errorf("build %s: %w", r.Name, err)
	}
	for i := range layers {
		_ = os.RemoveAll(filepath.Join(work, fmt.Sprintf("lower%d", i)))
	}
	gz := filepath.Join(work, "layer.tar.gz")
	if err := imagestore.WriteLayer(ctx, upper, gz); err != nil {
		return Result{}, fmt.Errorf("build %s: layer: %w", r.Name, err)
	}
	layer, err := tarball.LayerFromFile(gz, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return Result{}, fmt.Errorf("build %s: layer: %w", r.Name, err)
	}
	res := Result{Uncompressed: duBytes(upper)}
	if res.Size, err = layer.Size(); err != nil {
		return Result{}, fmt.Errorf("build %s: layer: %w", r.Name, err)
	}
	b.step(start, "layer compressed: %s (%s unpacked)", mb(res.Size), mb(res.Uncompressed))
	img, err := mutate.Append(baseImg, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: time.Now().UTC()},
			CreatedBy: "apt-get install --no-install-recommends " + strings.Join(r.Own.Packages, " "),
			Comment:   "deskgrid images build",
		},
	})
	if err != nil {
		return Result{}, fmt.Errorf("build %s: %w", r.Name, err)
	}
	if img, err = r.configure(img); err != nil {
		return Result{}, fmt.Errorf("build %s: %w", r.Name, err)
	}
	return b.finish(start, r, img, work, out, res)
}

// layoutImage is the (first) image of an OCI layout.
func layoutImage(dir string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) == 0 {
		return nil, fmt.Errorf("%s holds no image", dir)
	}
	return p.Image(m.Manifests[0].Digest)
}

// unpackLayer unpacks one layer into dir, whiteouts in overlayfs form,
// device nodes and overlayfs's own attributes left out.
func unpackLayer(ctx context.Context, l v1.Layer, dir string) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	filter := func(h *tar.Header) (bool, error) {
		if h.Typeflag == tar.TypeBlock || h.Typeflag == tar.TypeChar {
			return false, nil
		}
		for k := range h.PAXRecords {
			if strings.HasPrefix(k, "SCHILY.xattr.trusted.") {
				delete(h.PAXRecords, k)
			}
		}
		return true, nil
	}
	_, err = archive.Apply(ctx, dir, rc, archive.WithConvertWhiteout(archive.OverlayConvertWhiteout), archive.WithFilter(filter))
	return err
}

// configure gives img r's image config.
func (r *Recipe) configure(img v1.Image) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: time.Now().UTC()}
	cf.Author = "deskgrid"
	cf.Config.User = r.Config.User
	cf.Config.WorkingDir = r.Config.WorkingDir
	cf.Config.Env = r.Config.Env
	cf.Config.Cmd = r.Config.Cmd
	cf.Config.Labels = map[string]string{}
	for k, v := range r.Config.Labels {
		cf.Config.Labels[k] = v
	}
	if r.Description != "" {
		cf.Config.Labels["org.opencontainers.image.description"] = r.Description
	}
	return mutate.ConfigFile(img, cf)
}

// writeLayout writes img as r's image into a new OCI layout, staged in work
// and moved to out.
func (r *Recipe) writeLayout(img v1.Image, work, out string) (v1.Hash, error) {
	staged := filepath.Join(work, "layout")
	p, err := layout.Write(staged, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("build %s: layout: %w", r.Name, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": r.Name,
		"io.containerd.image.name":          r.Name,
	})); err != nil {
		return v1.Hash{}, fmt.Errorf("build %s: write layout: %w", r.Name, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("build %s: %w", r.Name, err)
	}
	if err := os.Chmod(staged, 0o755); err != nil {
		return v1.Hash{}, fmt.Errorf("build %s: %w", r.Name, err)
	}
	_ = os.Remove(out) // an empty directory checkOut allowed
	if err := os.Rename(staged, out); err != nil {
		return v1.Hash{}, fmt.Errorf("build %s: %w", r.Name, err)
	}
	return digest, nil
}

// run runs cmd with the system's PATH, its output going to Progress line by
// line under prefix; a failure carries the output's last lines.
func (b *Builder) run(ctx context.Context, prefix string, cmd *exec.Cmd) error {
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "PATH="+systemPath, "LC_ALL=C.UTF-8")
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	var tail lastLines
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			tail.add(line)
			fmt.Fprintf(b.d.Progress, "  %s: %s\n", prefix, line)
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s: %w\n%s", prefix, err, tail.String())
	}
	return nil
}

// duBytes is the size of the regular files under dir.
func duBytes(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
