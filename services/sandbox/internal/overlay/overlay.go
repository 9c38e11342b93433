// Package overlay mounts a session's writable layer over a read-only lower
// directory, with the kernel's overlayfs or, where the kernel refuses (an
// unprivileged host, a lower on a filesystem overlayfs cannot stack on),
// with fuse-overlayfs, and where neither works, with a plain copy.
package overlay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ErrRefused means a driver cannot mount here at all; the next driver of a
// Chain is tried.
var ErrRefused = errors.New("overlay mount refused")

// ErrUnsafePath means a path cannot be passed in a mount option string.
var ErrUnsafePath = errors.New("path cannot be used in an overlay mount")

// Layers are the directories of one overlay mount.
type Layers struct {
	Lower  string
	Upper  string
	Work   string
	Merged string
	// Owner, when set, remaps ownership: the owner's files appear as root's
	// in the merged view, and what root creates through it is stored as the
	// owner's. A sandbox (whose user is host root behind its user namespace)
	// can then edit a workspace that belongs to an ordinary host user.
	Owner *Owner
}

// Owner is a host user and group.
type Owner struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Driver mounts and unmounts overlays.
type Driver interface {
	// Name is reported to clients, such as "overlayfs".
	Name() string
	Mount(ctx context.Context, l Layers) error
	Unmount(ctx context.Context, merged string) error
}

// CheckPath refuses paths that the comma- and colon-separated option string
// of overlayfs (and fuse-overlayfs) cannot carry unambiguously. Refusing is
// simpler and safer than escaping, which the two drivers parse differently.
func CheckPath(p string) error {
	if p == "" || p[0] != '/' {
		return fmt.Errorf("%w: %q is not absolute", ErrUnsafePath, p)
	}
	for _, r := range p {
		switch {
		case r == ',' || r == ':' || r == '\\' || r == '=':
			return fmt.Errorf("%w: %q contains %q", ErrUnsafePath, p, r)
		case r < 0x20 || r == 0x7f:
			return fmt.Errorf("%w: %q contains a control character", ErrUnsafePath, p)
		}
	}
	return nil
}

func (l Layers) options() (string, error) {
	for _, p := range []string{l.Lower, l.Upper, l.Work, l.Merged} {
		if err := CheckPath(p); err != nil {
			return "", err
		}
	}
	return "lowerdir=" + l.Lower + ",upperdir=" + l.Upper + ",workdir=" + l.Work, nil
}

// Chain mounts with the first driver that does not refuse.
type Chain []Driver

// Mount returns the driver that made the mount.
func (c Chain) Mount(ctx context.Context, l Layers) (Driver, error) {
	var errs []error
	for _, d := range c {
		err := d.Mount(ctx, l)
		if err == nil {
			return d, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", d.Name(), err))
		if !errors.Is(err, ErrRefused) {
			break
		}
	}
	if len(errs) == 0 {
		return nil, errors.New("no overlay driver configured")
	}
	return nil, errors.Join(errs...)
}

// Unmount detaches a mount made by any driver: unmount(2) works for FUSE
// mounts too when the caller is privileged. A busy mount is retried for a
// short while, then detached lazily so it disappears once its last user goes.
// Unmounting something that is not mounted succeeds.
func Unmount(ctx context.Context, merged string) error {
	delay := 5 * time.Millisecond
	for range 5 {
		err := unix.Unmount(merged, 0)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT):
			return nil // not a mount point (any more)
		case errors.Is(err, unix.EBUSY):
		default:
			return fmt.Errorf("unmount %s: %w", merged, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
		delay *= 2
	}
	if err := unix.Unmount(merged, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("detach %s: %w", merged, err)
	}
	return nil
}
