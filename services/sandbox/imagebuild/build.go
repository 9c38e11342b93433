package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"

	"github.com/deskgrid/deskgrid/services/sandbox/internal/container"
)

// Deps are what a Builder needs from the machine.
type Deps struct {
	// Mmdebstrap is the mmdebstrap executable.
	Mmdebstrap string
	// Sources are apt sources files (one-line or deb822) naming the archive
	// packages come from; empty means mmdebstrap's default mirror.
	Sources []string
	// Progress receives one line per step and mmdebstrap's own messages.
	Progress io.Writer
}

// Builder turns recipes into OCI image layouts.
type Builder struct {
	d Deps
}

// New returns a Builder; every dependency but Sources is required.
func New(d Deps) (*Builder, error) {
	switch {
	case d.Mmdebstrap == "":
		return nil, errors.New("imagebuild: no mmdebstrap executable given")
	case d.Progress == nil:
		return nil, errors.New("imagebuild: no progress writer given")
	}
	return &Builder{d: d}, nil
}

// HostSources lists the apt sources files of this machine, so an image is
// built from the same archive the machine installs from.
func HostSources() []string {
	var out []string
	if fi, err := os.Stat("/etc/apt/sources.list"); err == nil && fi.Size() > 0 {
		out = append(out, "/etc/apt/sources.list")
	}
	for _, pat := range []string{"/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources"} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// Result describes a built image.
type Result struct {
	// Digest is the image manifest's digest.
	Digest v1.Hash
	// Size is the size of the compressed layer; Uncompressed of the root
	// filesystem tar.
	Size, Uncompressed int64
	// Packages is how many packages the root filesystem holds.
	Packages int
	// Duration is the whole build, from mmdebstrap to the written layout.
	Duration time.Duration
}

// Build builds r into a new OCI image layout at out, which must not exist or
// be empty. Nothing is left at out when the build fails.
func (b *Builder) Build(ctx context.Context, r *Recipe, out string) (Result, error) {
	start := time.Now()
	if err := checkOut(out); err != nil {
		return Result{}, err
	}
	work, err := workDir(r, out)
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work)

	b.step(start, "building %s: %d Debian packages (%s), %s", r.Name, len(r.Packages), r.Suite, strings.Join(r.Packages, " "))
	rootfs := filepath.Join(work, "rootfs.tar")
	if err := b.mmdebstrap(ctx, r, rootfs); err != nil {
		return Result{}, err
	}
	fi, err := os.Stat(rootfs)
	if err != nil {
		return Result{}, fmt.Errorf("build %s: root filesystem: %w", r.Name, err)
	}
	res := Result{Uncompressed: fi.Size()}
	b.step(start, "root filesystem done: %s", mb(fi.Size()))

	gz := filepath.Join(work, "layer.tar.gz")
	dirs, err := emptyDirEntries()
	if err != nil {
		return Result{}, fmt.Errorf("build %s: %w", r.Name, err)
	}
	if err := b.compress(ctx, start, dirs, rootfs, gz, fi.Size()); err != nil {
		return Result{}, err
	}
	_ = os.Remove(rootfs)

	layer, err := tarball.LayerFromFile(gz, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return Result{}, fmt.Errorf("build %s: layer: %w", r.Name, err)
	}
	if res.Size, err = layer.Size(); err != nil {
		return Result{}, fmt.Errorf("build %s: layer: %w", r.Name, err)
	}
	b.step(start, "layer compressed: %s", mb(res.Size))

	img, err := r.image(layer)
	if err != nil {
		return Result{}, fmt.Errorf("build %s: %w", r.Name, err)
	}
	return b.finish(start, r, img, work, out, res)
}

// finish writes img, the image r builds, as the OCI layout at out (through
// work) and completes res.
func (b *Builder) finish(start time.Time, r *Recipe, img v1.Image, work, out string, res Result) (Result, error) {
	var err error
	if res.Digest, err = r.writeLayout(img, work, out); err != nil {
		return Result{}, err
	}
	res.Packages = len(r.Packages)
	res.Duration = time.Since(start)
	b.step(start, "wrote %s (%s) to %s", r.Name, res.Digest, out)
	return res, nil
}

func checkOut(out string) error {
	entries, err := os.ReadDir(out)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("output %s: %w", out, err)
	case len(entries) > 0:
		return fmt.Errorf("output %s already exists and is not empty", out)
	}
	return nil
}

// workDir makes the scratch directory of r's build beside out, on out's
// filesystem. The caller removes it.
func workDir(r *Recipe, out string) (string, error) {
	parent := filepath.Dir(filepath.Clean(out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("build %s: %w", r.Name, err)
	}
	work, err := os.MkdirTemp(parent, ".build-"+filepath.Base(out)+"-")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", r.Name, err)
	}
	return work, nil
}

// image is the OCI image of one root filesystem layer and r's config.
func (r *Recipe) image(layer v1.Layer) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: time.Now().UTC()},
			CreatedBy: "mmdebstrap --variant=" + r.variant() + " " + r.Suite + " (" + strings.Join(r.Packages, ",") + ")",
			Comment:   "deskgrid images build",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = runtime.GOARCH
	cf.OS = "linux"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	return r.configure(img)
}

func (r *Recipe) variant() string {
	if r.Variant == "" {
		return "apt"
	}
	return r.Variant
}

// Files mmdebstrap copies from the build machine into the root filesystem
// (its /etc/hostname and /etc/resolv.conf), written anew so that an image
// says nothing of where it was built and works wherever it runs: the files
// the sandbox runtime gives every session (package container), which binds
// its own over them, and another runtime may not. A recipe's files and
// setup script may still replace /etc/hostname and /etc/hosts.
var (
	imageHostname = writeHook("/etc/hostname", "sandbox\n")
	imageHosts    = writeHook("/etc/hosts", container.HostsFile("sandbox"))
	imageResolv   = writeHook("/etc/resolv.conf", container.ResolvConf(true))
)

// writeHook is an mmdebstrap hook that replaces the file p of the root
// filesystem with content.
func writeHook(p, content string) string {
	esc := strings.NewReplacer("\\", "\\\\", "%", "%%", "'", `'\''`, "\t", `\t`, "\n", `\n`).Replace(content)
	return fmt.Sprintf("rm -f \"$1%s\" && printf '%s' > \"$1%s\"", p, esc, p)
}

// mmdebstrap builds r's root filesystem into the tar file out.
func (b *Builder) mmdebstrap(ctx context.Context, r *Recipe, out string) error {
	cmd := exec.CommandContext(ctx, b.d.Mmdebstrap, b.mmdebstrapArgs(r, out)...)
	// The system's PATH (b.run): mmdebstrap's helpers (mmtarfilter, a
	// python3 script) and the tools its hooks run must be Debian's, not a
	// user's shims.
	if err := b.run(ctx, "mmdebstrap", cmd); err != nil {
		_ = os.Remove(out)
		return fmt.Errorf("build %s: %w", r.Name, err)
	}
	return nil
}

// mmdebstrapArgs is mmdebstrap's command line for r's root filesystem.
func (b *Builder) mmdebstrapArgs(r *Recipe, out string) []string {
	args := []string{
		"--variant=" + r.variant(),
		"--include=" + strings.Join(r.Packages, ","),
		// No device nodes in the layer: the runtime gives a session its /dev.
		"--skip=output/dev",
	}
	for _, o := range r.DpkgOptions {
		args = append(args, "--dpkgopt="+o)
	}
	args = append(args, "--customize-hook="+imageHostname, "--customize-hook="+imageHosts)
	for _, dir := range r.FileDirs {
		// Owned by root, never group- or world-writable, existing directories
		// keep their own modes.
		args = append(args, "--customize-hook=tar -C "+shellQuote(dir)+
			" --owner=0 --group=0 --numeric-owner --mode=go-w -cf - . | tar -C \"$1\" --no-overwrite-dir -xpf -")
	}
	for _, s := range r.Scripts {
		args = append(args, "--customize-hook=chroot \"$1\" /bin/sh -eu -s < "+shellQuote(s))
	}
	// Last: the recipe's setup script may still need the build machine's DNS.
	args = append(args, "--customize-hook="+imageResolv)
	args = append(args, r.Suite, out)
	return append(args, b.d.Sources...)
}

// emptyDirs are the directories a built layer holds empty, as mount points:
// mmdebstrap leaves /dev out whole with its device nodes, and the runtime
// would otherwise make it in each session's writable layer, where it shows
// among the session's changes and goes into every commit.
var emptyDirs = []string{"dev"}

// emptyDirEntries is the tar headers of emptyDirs (no end-of-archive
// blocks), to go before the root filesystem's own entries.
func emptyDirEntries() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range emptyDirs {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: "./" + d + "/", Mode: 0o755, ModTime: time.Unix(0, 0), Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", d, err)
		}
	}
	if err := tw.Flush(); err != nil {
		return nil, fmt.Errorf("layer entries: %w", err)
	}
	return buf.Bytes(), nil
}

// compress gzips prefix then src into dst, reporting progress every few
// seconds.
func (b *Builder) compress(ctx context.Context, start time.Time, prefix []byte, src, dst string, total int64) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("compress layer: %w", err)
	}
	defer in.Close()
	f, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("compress layer: %w", err)
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, gzip.DefaultCompression)
	if err != nil {
		return fmt.Errorf("compress layer: %w", err)
	}
	if _, err := zw.Write(prefix); err != nil {
		return fmt.Errorf("compress layer: %w", err)
	}
	var n atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				b.step(start, "compressing layer: %s of %s", mb(n.Load()), mb(total))
			}
		}
	}()
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("compress layer: %w", err)
		}
		k, rerr := in.Read(buf)
		if k > 0 {
			if _, err := zw.Write(buf[:k]); err != nil {
				return fmt.Errorf("compress layer: %w", err)
			}
			n.Add(int64(k))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("compress layer: %w", rerr)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress layer: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("compress layer: %w", err)
	}
	return nil
}

func (b *Builder) step(start time.Time, format string, a ...any) {
	fmt.Fprintf(b.d.Progress, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
}

const systemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// lastLines keeps the last few lines of a command's output for its error.
type lastLines struct{ lines []string }

func (l *lastLines) add(s string) {
	l.lines = append(l.lines, s)
	if len(l.lines) > 20 {
		l.lines = l.lines[1:]
	}
}

func (l *lastLines) String() string { return strings.Join(l.lines, "\n") }
