package imagebuild

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultCacheDir holds the images scripts/setup builds, one directory per
// recipe hash, and a symlink per recipe name to its newest build.
const DefaultCacheDir = "/var/cache/deskgrid/images"

// DesktopImageEnv names the OCI layout of the default desktop image when it
// is not the one in DefaultCacheDir.
const DesktopImageEnv = "DESKGRID_DESKTOP_IMAGE"

// DesktopLayout is where the default desktop image's OCI layout is:
// $DESKGRID_DESKTOP_IMAGE, or DefaultCacheDir/desktop.
func DesktopLayout() string {
	if p := os.Getenv(DesktopImageEnv); p != "" {
		return p
	}
	return filepath.Join(DefaultCacheDir, "desktop")
}

// Cached builds r into cacheDir/<name>-<hash> unless that layout is already
// there, and points the symlink cacheDir/<name> at it; name is the base name
// of the recipe's directory. It returns the layout's directory and whether it
// was built now. A recipe that extends another is built on the other's
// image, cached the same way first (Builder.BuildOn), when this runs as
// root; otherwise, and for other recipes, from scratch (Builder.Build).
func (b *Builder) Cached(ctx context.Context, r *Recipe, cacheDir string) (string, bool, error) {
	hash, err := r.Hash()
	if err != nil {
		return "", false, err
	}
	name := filepath.Base(r.Dir)
	dir := filepath.Join(cacheDir, name+"-"+hash)
	built := false
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		if err := os.RemoveAll(dir); err != nil {
			return "", false, fmt.Errorf("cache %s: %w", dir, err)
		}
		if r.Base != nil && os.Geteuid() == 0 {
			base, _, err := b.Cached(ctx, r.Base, cacheDir)
			if err != nil {
				return "", false, err
			}
			if _, err := b.BuildOn(ctx, r, base, dir); err != nil {
				return "", false, err
			}
		} else if _, err := b.Build(ctx, r, dir); err != nil {
			return "", false, err
		}
		built = true
	} else {
		fmt.Fprintf(b.d.Progress, "%s is up to date in %s\n", r.Name, dir)
	}
	link := filepath.Join(cacheDir, name)
	tmp := link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(dir), tmp); err != nil {
		return "", false, fmt.Errorf("cache %s: %w", link, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		return "", false, fmt.Errorf("cache %s: %w", link, err)
	}
	return dir, built, nil
}
