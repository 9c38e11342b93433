package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"

	"github.com/deskgrid/deskgrid/services/sandbox/imagebuild"
)

const imagesBuildUsage = `Usage:
  deskgrid images build <recipe-dir> -o <layout-dir>   build an image from a recipe into a new OCI layout
  deskgrid images build <recipe-dir> -cache <dir>      the same into <dir>/<name>-<recipe hash> unless there,
                                                       and point <dir>/<name> at it

A recipe is a directory with recipe.yaml, packages, files/ and setup.sh
(deploy/images/desktop is the default desktop). Packages come from Debian with
mmdebstrap, from this machine's apt sources; building needs root, or
mmdebstrap's unshare mode with subordinate ids. With -cache, as root, a
recipe that extends another (deploy/images/desktop-office) is built as one
layer on the other's image, which is built into the cache first if it is not
there: only its own packages are installed, with apt in a chroot.
`

// runImagesBuild is "deskgrid images build".
func runImagesBuild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("images build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, imagesBuildUsage); fs.PrintDefaults() }
	out := fs.String("o", "", "OCI layout directory to write (must not exist or be empty)")
	cache := fs.String("cache", "", "cache directory: build only when the recipe changed (scripts/setup uses "+imagebuild.DefaultCacheDir+")")
	mmdebstrap := fs.String("mmdebstrap", "mmdebstrap", "the mmdebstrap executable")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("images build: want one recipe directory")
	}
	if (*out == "") == (*cache == "") {
		return usageError("images build: want one of -o <layout-dir> or -cache <dir>")
	}
	recipe, err := imagebuild.Load(pos[0])
	if err != nil {
		return err
	}
	bin, err := exec.LookPath(*mmdebstrap)
	if err != nil {
		return errors.New("images build: mmdebstrap not found: install the Debian package mmdebstrap (scripts/setup does)")
	}
	b, err := imagebuild.New(imagebuild.Deps{Mmdebstrap: bin, Sources: imagebuild.HostSources(), Progress: stderr})
	if err != nil {
		return err
	}
	if *cache != "" {
		dir, _, err := b.Cached(ctx, recipe, *cache)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, dir)
		return nil
	}
	res, err := b.Build(ctx, recipe, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s layer %.1f MB (%.1f MB unpacked), built in %s\n",
		recipe.Name, res.Digest, float64(res.Size)/1e6, float64(res.Uncompressed)/1e6, res.Duration.Round(1e9))
	return nil
}
