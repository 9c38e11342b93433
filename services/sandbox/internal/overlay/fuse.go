package overlay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// FUSE mounts with fuse-overlayfs (Debian package fuse-overlayfs). The
// program daemonizes once the mount is ready, so Mount returns a usable mount.
type FUSE struct {
	// Binary is the fuse-overlayfs executable; empty means "fuse-overlayfs" on PATH.
	Binary string
	// Fusermount unmounts as an unprivileged user; empty means "fusermount3".
	Fusermount string
}

// Name implements Driver.
func (FUSE) Name() string { return "fuse-overlayfs" }

func (f FUSE) binary() string {
	if f.Binary != "" {
		return f.Binary
	}
	return "fuse-overlayfs"
}

// Mount implements Driver.
func (f FUSE) Mount(ctx context.Context, l Layers) error {
	opts, err := l.options()
	if err != nil {
		return err
	}
	if l.Owner != nil {
		// fuse-overlayfs reads these as on-disk id : id shown : count.
		opts += fmt.Sprintf(",uidmapping=%d:0:1,gidmapping=%d:0:1", l.Owner.UID, l.Owner.GID)
	}
	bin, err := exec.LookPath(f.binary())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-o", opts, l.Merged)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		// No /dev/fuse, no FUSE in the kernel, no permission: the next
		// driver (a copy) still works.
		return fmt.Errorf("%w: fuse-overlayfs on %s: %w: %s", ErrRefused, l.Merged, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Unmount implements Driver.
func (f FUSE) Unmount(ctx context.Context, merged string) error {
	err := Unmount(ctx, merged)
	if err == nil || !errors.Is(err, unix.EPERM) {
		return err
	}
	bin := f.Fusermount
	if bin == "" {
		bin = "fusermount3"
	}
	out, ferr := exec.CommandContext(ctx, bin, "-u", "-z", merged).CombinedOutput()
	if ferr != nil {
		return fmt.Errorf("%s -u %s: %w: %s", bin, merged, ferr, strings.TrimSpace(string(out)))
	}
	return nil
}
