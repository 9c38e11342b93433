// Package disk gives a session's writable layer a size limit by putting it
// on a filesystem of that size: an ext4 image mounted through a loop device
// (disk-backed, survives a node restart), or tmpfs (no helper programs, but
// its pages count as memory).
package disk

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Kinds of backing.
const (
	Ext4  = "ext4"
	Tmpfs = "tmpfs"
)

// minExt4 is the smallest image mkfs.ext4 makes usefully.
const minExt4 = 4 << 20

// Backing makes size-limited filesystems.
type Backing struct {
	Kind string
	// Mkfs and Mount name the helper programs for Ext4 (Debian packages
	// e2fsprogs and mount); empty means "mkfs.ext4" and "mount" on PATH.
	Mkfs, Mount string
}

// Choose returns Ext4 when its helpers are installed, Tmpfs otherwise.
func Choose(mkfs, mount string) Backing {
	b := Backing{Kind: Ext4, Mkfs: mkfs, Mount: mount}
	if _, err := exec.LookPath(b.mkfs()); err != nil {
		return Backing{Kind: Tmpfs}
	}
	if _, err := exec.LookPath(b.mount()); err != nil {
		return Backing{Kind: Tmpfs}
	}
	return b
}

func (b Backing) mkfs() string {
	if b.Mkfs != "" {
		return b.Mkfs
	}
	return "mkfs.ext4"
}

func (b Backing) mount() string {
	if b.Mount != "" {
		return b.Mount
	}
	return "mount"
}

// Create makes a filesystem of size bytes and mounts it on dir; for Ext4
// the image is the file image.
func (b Backing) Create(ctx context.Context, dir, image string, size int64) error {
	switch b.Kind {
	case Tmpfs:
		return mountTmpfs(dir, size)
	case Ext4:
		size = max(size, minExt4)
		f, err := os.OpenFile(image, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("disk image: %w", err)
		}
		err = f.Truncate(size) // sparse: only what is written takes space
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("disk image: %w", err)
		}
		// No journal and no reserved blocks: a scratch layer needs neither.
		if err := run(ctx, b.mkfs(), "-q", "-F", "-O", "^has_journal", "-m", "0", "-E", "nodiscard", image); err != nil {
			return err
		}
		return b.Remount(ctx, dir, image)
	}
	return fmt.Errorf("unknown disk backing %q", b.Kind)
}

// Remount mounts an existing image again (after a node restart).
func (b Backing) Remount(ctx context.Context, dir, image string) error {
	if b.Kind == Tmpfs {
		return fmt.Errorf("a tmpfs layer cannot be mounted again: its content is gone")
	}
	// -o loop sets up the loop device with autoclear: unmounting frees it.
	return run(ctx, b.mount(), "-t", "ext4", "-o", "loop,nosuid,nodev", image, dir)
}

func mountTmpfs(dir string, size int64) error {
	opts := "size=" + strconv.FormatInt(size, 10) + ",mode=0755"
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

func run(ctx context.Context, name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(out.String()))
	}
	return nil
}
