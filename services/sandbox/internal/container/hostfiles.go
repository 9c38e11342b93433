package container

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A session's /etc/hostname, /etc/hosts and /etc/resolv.conf are the
// runtime's, as a Docker container's are: written into the bundle and bound
// over the image's, so that every image, whatever it carries (often nothing,
// or the files of the machine it was built on), resolves localhost and its
// own name and asks the session network's DNS server. What a session writes
// to them goes to the bundle's copies, never into its writable layer; where
// the image has no such file, the empty mount point runc makes in the layer
// is no change of the session's (see MountPoints).

// SessionDNS is the DNS server of a session's user-mode network
// (slirp4netns, package jail).
const SessionDNS = "10.0.2.3"

// HostsFile is the /etc/hosts of a machine named hostname.
func HostsFile(hostname string) string {
	return "127.0.0.1\tlocalhost\n127.0.1.1\t" + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"
}

// ResolvConf is the /etc/resolv.conf of a session with or without network.
func ResolvConf(network bool) string {
	if !network {
		return "# this session has no network\n"
	}
	return "nameserver " + SessionDNS + "\n"
}

// MountPoints are the paths (relative to the root, slash-separated) the
// runtime mounts over in every container: the entries at them in a session's
// writable layer are mount points runc made where the image had none, never
// the session's own content (that lands in the mounted filesystem).
var MountPoints = []string{"dev", "proc", "sys", "tmp", "run", "etc/hostname", "etc/hosts", "etc/resolv.conf"}

// hostFiles writes c's host files into its bundle (owned by the session's
// root, which may edit them) and returns their mounts: only where the image
// is a system with an /etc, and not over what the image made something else
// than a file (a directory, or a link to a file elsewhere than the runtime's
// /run or /tmp, which the session would otherwise see replaced).
func hostFiles(c Config, rootfs, hostname string) ([]specs.Mount, error) {
	if fi, err := os.Lstat(filepath.Join(rootfs, "etc")); err != nil || !fi.IsDir() {
		return nil, nil
	}
	dir := hostFilesDir(c.Bundle)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("container host files: %w", err)
	}
	// On a tmpfs of their own, small: a session's writes to them are held
	// by the node's memory, outside its disk quota, and must not fill the
	// node's /run.
	opts := fmt.Sprintf("mode=0755,size=%d,nr_inodes=16", hostFilesSize)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, opts); err != nil {
		return nil, fmt.Errorf("container host files: %w", err)
	}
	files := []struct{ name, content string }{
		{"hostname", hostname + "\n"},
		{"hosts", HostsFile(hostname)},
		{"resolv.conf", ResolvConf(c.Network)},
	}
	var mounts []specs.Mount
	for _, f := range files {
		if !boundOver(rootfs, "/etc/"+f.name) {
			continue
		}
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, []byte(f.content), 0o644); err != nil {
			return nil, fmt.Errorf("container host files: %w", err)
		}
		if err := os.Chown(p, int(c.Range.Base), int(c.Range.Base)); err != nil {
			return nil, fmt.Errorf("container host files: %w", err)
		}
		mounts = append(mounts, specs.Mount{
			Destination: "/etc/" + f.name, Type: "bind", Source: p,
			Options: []string{"bind", "nosuid", "nodev", "noexec"},
		})
	}
	return mounts, nil
}

// hostFilesSize bounds what a session's host files may hold together.
const hostFilesSize = 64 << 10

// hostFilesDir is where a bundle's host files are.
func hostFilesDir(bundle string) string { return filepath.Join(bundle, "etc") }

// boundOver reports whether the runtime's file may be bound at dst (an
// absolute path) in rootfs: dst is a file, missing, or a link into the
// runtime's own /run or /tmp (systemd-resolved's and resolvconf's
// resolv.conf), which runc follows there.
func boundOver(rootfs, dst string) bool {
	fi, err := os.Lstat(filepath.Join(rootfs, dst))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true
	case err != nil:
		return false
	case fi.Mode().IsRegular():
		return true
	case fi.Mode()&fs.ModeSymlink == 0:
		return false
	}
	target, err := os.Readlink(filepath.Join(rootfs, dst))
	if err != nil {
		return false
	}
	if !path.IsAbs(target) {
		target = path.Join(path.Dir(dst), target)
	}
	target = path.Clean(target)
	return strings.HasPrefix(target, "/run/") || strings.HasPrefix(target, "/tmp/")
}

// IsMountPoint reports whether the entry at rel (slash-separated, relative
// to the root) in a container's writable layer upper is a mount point runc
// made there: at one of MountPoints, an empty file or directory, where lower
// (the image) has nothing.
func IsMountPoint(upper, lower, rel string) bool {
	rel = strings.Trim(rel, "/")
	if !slices.Contains(MountPoints, rel) {
		return false
	}
	// Both trees are looked at beneath themselves: an image's /etc may be
	// a link (to /etc, say), never to be followed on the node.
	lroot, err := os.OpenRoot(lower)
	if err != nil {
		return false
	}
	defer lroot.Close()
	if _, err := lroot.Lstat(rel); err == nil {
		return false
	}
	uroot, err := os.OpenRoot(upper)
	if err != nil {
		return false
	}
	defer uroot.Close()
	fi, err := uroot.Lstat(rel)
	switch {
	case err != nil:
		return false
	case fi.Mode().IsRegular():
		return fi.Size() == 0
	case fi.IsDir():
		d, err := uroot.Open(rel)
		if err != nil {
			return false
		}
		defer d.Close()
		names, err := d.Readdirnames(1)
		return len(names) == 0 && errors.Is(err, io.EOF)
	}
	return false
}
