// Package idmap shifts the owners of a directory tree for one session
// without touching the files: an idmapped mount (Linux 5.12+) shows a tree
// owned by host uid/gid 0..Size-1 as owned by Base..Base+Size-1, so that a
// session whose user namespace maps its 0..Size-1 to that host range sees
// the shared, host-root-owned image layers as its own root's.
package idmap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// Range is a session's host uid/gid range: ids 0..Size-1 inside its user
// namespace are Base..Base+Size-1 on the host.
type Range struct {
	Base uint32 `json:"base"`
	Size uint32 `json:"size"`
}

// Host is the host id of id inside the range's namespace.
func (r Range) Host(id uint32) uint32 { return r.Base + id }

// Contains reports whether host id h belongs to the range.
func (r Range) Contains(h uint32) bool { return h >= r.Base && h-r.Base < r.Size }

// Valid reports a range that maps something and does not include host root.
func (r Range) Valid() error {
	if r.Size == 0 || r.Base == 0 || uint64(r.Base)+uint64(r.Size) > 1<<32-1 {
		return fmt.Errorf("id range %d+%d is not a usable unprivileged range", r.Base, r.Size)
	}
	return nil
}

// UserNS returns a user namespace (an open /proc/<pid>/ns/user) that maps
// 0..r.Size-1 to r.Base.. for uids and gids. It is made by a short-lived
// child (helper: any program that blocks reading its stdin, "cat" when
// empty) that is ended before UserNS returns; the namespace lives as long
// as the returned file is open.
func UserNS(r Range, helper string) (*os.File, error) {
	if err := r.Valid(); err != nil {
		return nil, err
	}
	if helper == "" {
		helper = "cat"
	}
	path, err := exec.LookPath(helper)
	if err != nil {
		return nil, fmt.Errorf("idmap: %w", err)
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer stdinW.Close()
	cmd := exec.Command(path)
	cmd.Stdin = stdinR
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.Base), Size: int(r.Size)}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.Base), Size: int(r.Size)}},
		Pdeathsig:   syscall.SIGKILL,
	}
	err = cmd.Start()
	stdinR.Close()
	if err != nil {
		return nil, fmt.Errorf("idmap: start a user namespace: %w", err)
	}
	// Start returns once the child has been mapped and has run its program.
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		return nil, fmt.Errorf("idmap: open the user namespace: %w", err)
	}
	return ns, nil
}

// Options of Mount.
type Options struct {
	ReadOnly, NoSuid, NoDev bool
}

// Mount makes an idmapped, non-recursive bind mount of src at dst (which
// must exist) through the user namespace userns: a file owned by host id n
// in src is seen in dst as owned by the host id that n maps to in userns.
func Mount(src, dst string, userns *os.File, opt Options) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("idmap: open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
	if opt.ReadOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if opt.NoSuid {
		attr.Attr_set |= unix.MOUNT_ATTR_NOSUID
	}
	if opt.NoDev {
		attr.Attr_set |= unix.MOUNT_ATTR_NODEV
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			return fmt.Errorf("idmap: the filesystem of %s cannot be idmapped on this kernel: %w", src, err)
		}
		return fmt.Errorf("idmap: mount_setattr %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmap: move_mount to %s: %w", dst, err)
	}
	return nil
}

// Unmount detaches an idmapped mount.
func Unmount(dst string) error {
	if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("idmap: unmount %s: %w", dst, err)
	}
	return nil
}
