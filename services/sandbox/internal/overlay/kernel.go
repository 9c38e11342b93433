package overlay

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Kernel mounts with the kernel's overlayfs.
type Kernel struct{}

// Name implements Driver.
func (Kernel) Name() string { return "overlayfs" }

// Mount implements Driver.
func (Kernel) Mount(_ context.Context, l Layers) error {
	opts, err := l.options()
	if err != nil {
		return err
	}
	if l.Owner != nil {
		return fmt.Errorf("%w: kernel overlayfs cannot remap the ownership of %s (owner uid %d)", ErrRefused, l.Lower, l.Owner.UID)
	}
	err = unix.Mount("overlay", l.Merged, "overlay", 0, opts)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES),
		errors.Is(err, unix.ENODEV), errors.Is(err, unix.EINVAL),
		errors.Is(err, unix.EOPNOTSUPP):
		// No privilege, no overlay module, or layers the kernel cannot stack.
		return fmt.Errorf("%w: mount overlay on %s: %w", ErrRefused, l.Merged, err)
	default:
		return fmt.Errorf("mount overlay on %s: %w", l.Merged, err)
	}
}

// Unmount implements Driver.
func (Kernel) Unmount(ctx context.Context, merged string) error { return Unmount(ctx, merged) }
