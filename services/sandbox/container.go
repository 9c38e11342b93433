package sandbox

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/container"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/idmap"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
)

// A sandbox created from an image is one runc container (package
// container): its root filesystem is an overlay of the image's layers, each
// seen through an idmapped mount in the session's own host uid/gid range,
// under the session's writable layer; every command is a `runc exec`.

// boxImage is what a container sandbox keeps of its image.
type boxImage struct {
	Ref    string       `json:"ref"`
	Digest string       `json:"digest"`
	Layers []string     `json:"layers"` // unpacked layer dirs, bottom first
	Config image.Config `json:"config"`
	Range  idmap.Range  `json:"range"`
	Slot   int          `json:"slot"`
}

// idRangeSize is each session's share of host ids: 0..65535 inside.
const idRangeSize = 65536

func (s *Service) containersDir() string { return s.cfg.ContainerDir }

func (s *Service) runtime() container.Runtime {
	return container.Runtime{Runc: s.cfg.RuncPath, Root: filepath.Join(s.cfg.ContainerDir, "runc")}
}

func (s *Service) bundle(id string) string { return filepath.Join(s.containersDir(), id) }

// defaultContainerDir is per sandbox root, so that services sharing a node
// (tests, several nodes on one machine) keep apart.
func defaultContainerDir(root string) string {
	h := sha256.Sum256([]byte(root))
	return filepath.Join("/run/deskgrid/containers", hex.EncodeToString(h[:6]))
}

// prepareContainers makes the directories containers need: runc reaches a
// root filesystem from inside the session's user namespace, so every
// directory above a bundle must be searchable (0711, not readable).
func (s *Service) prepareContainers() error {
	for _, d := range []string{s.cfg.ContainerDir, s.cfg.IDSlotDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return fmt.Errorf("container dir: %w", err)
		}
	}
	for p := s.cfg.ContainerDir; p != "/" && p != "."; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("container dir: %w", err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, st.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("container dir: %w", err)
			}
		}
	}
	return os.MkdirAll(s.runtime().Root, 0o700)
}

// claimSlot takes the first free id slot of the node for the sandbox dir
// owner: a directory per slot under IDSlotDir, made atomically, so that
// services sharing the node never hand out the same range. A slot whose
// owner no longer exists is taken over.
func (s *Service) claimSlot(owner string) (int, idmap.Range, error) {
	max := int((uint64(1<<32-1) - uint64(s.cfg.IDRangeBase)) / idRangeSize)
	for i := 0; i < max; i++ {
		p := filepath.Join(s.cfg.IDSlotDir, strconv.Itoa(i))
		err := os.Mkdir(p, 0o700)
		if errors.Is(err, fs.ErrExist) {
			data, rerr := os.ReadFile(filepath.Join(p, "owner"))
			if rerr != nil || ownerAlive(string(data)) {
				continue
			}
			// Stale: its sandbox is gone.
			if os.RemoveAll(p) != nil || os.Mkdir(p, 0o700) != nil {
				continue
			}
			err = nil
		}
		if err != nil {
			return 0, idmap.Range{}, fmt.Errorf("claim an id range: %w", err)
		}
		if err := os.WriteFile(filepath.Join(p, "owner"), []byte(owner), 0o600); err != nil {
			_ = os.RemoveAll(p)
			return 0, idmap.Range{}, fmt.Errorf("claim an id range: %w", err)
		}
		return i, idmap.Range{Base: s.cfg.IDRangeBase + uint32(i)*idRangeSize, Size: idRangeSize}, nil
	}
	return 0, idmap.Range{}, failf(errNoRoom, "this node has no free uid range for another session")
}

// ownerAlive reports whether a slot's owner (a sandbox dir) still exists.
func ownerAlive(owner string) bool {
	if owner == "" {
		return true // being written
	}
	_, err := os.Lstat(owner)
	return err == nil
}

func (s *Service) releaseSlot(slot int, owner string) {
	p := filepath.Join(s.cfg.IDSlotDir, strconv.Itoa(slot))
	if data, err := os.ReadFile(filepath.Join(p, "owner")); err == nil && string(data) == owner {
		_ = os.RemoveAll(p)
	}
}

// lowersDir holds the idmapped mounts of a container sandbox's layers.
func (b *box) lowersDir() string { return filepath.Join(b.dir, "lowers") }

// lowerView is where the image's layers appear merged, read-only and with
// their own owners, for the changes API.
func (b *box) lowerView() string { return filepath.Join(b.dir, "lower") }

// mountImage mounts a container sandbox's root filesystem: every image
// layer through an idmapped mount in its range, the session's upper on
// top, nosuid and nodev on the host's side.
func (s *Service) mountImage(b *box) error {
	im := b.img
	ns, err := idmap.UserNS(im.Range, "")
	if err != nil {
		return err
	}
	defer ns.Close()
	if err := os.Mkdir(b.lowersDir(), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	var lowers []string
	for i, l := range im.Layers {
		dst := filepath.Join(b.lowersDir(), strconv.Itoa(i))
		if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if mounted, _ := isMountPoint(dst); !mounted {
			if err := idmap.Mount(l, dst, ns, idmap.Options{ReadOnly: true, NoDev: true}); err != nil {
				return err
			}
		}
		lowers = append(lowers, dst)
	}
	slices.Reverse(lowers) // overlay lists the top layer first
	if len(im.Layers) == 0 {
		return invalidf("image %s has no layers", im.Ref)
	}
	// The changes API compares the upper with the image as stored.
	if err := os.Mkdir(b.lowerView(), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if mounted, _ := isMountPoint(b.lowerView()); !mounted {
		raw := slices.Clone(im.Layers)
		slices.Reverse(raw)
		var err error
		if len(raw) == 1 {
			err = unix.Mount(raw[0], b.lowerView(), "", unix.MS_BIND, "")
			if err == nil {
				err = unix.Mount("", b.lowerView(), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
			}
		} else {
			err = unix.Mount("overlay", b.lowerView(), "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "lowerdir="+strings.Join(raw, ":"))
		}
		if err != nil {
			return fmt.Errorf("mount the image's layers: %w", err)
		}
	}
	b.lower = b.lowerView()
	if b.fromSnapshot != "" {
		if err := s.extractSnapshot(b.fromSnapshot, b.lowerID(), b.upper()); err != nil {
			return err
		}
		if err := shiftOwners(b.upper(), s.cfg.IDRangeBase, im.Range); err != nil {
			return fmt.Errorf("restore snapshot: %w", err)
		}
		b.fromSnapshot = "" // once: an adopt remounts what is there
	}
	if err := os.Chown(b.upper(), int(im.Range.Base), int(im.Range.Base)); err != nil {
		return err
	}
	opts := "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + b.upper() + ",workdir=" + b.work()
	if err := unix.Mount("overlay", b.merged(), "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount the image's root filesystem: %w", err)
	}
	return nil
}

// shiftOwners moves the files of a restored upper layer, owned by whatever
// range the snapshotted session had, into range r (the same id inside).
func shiftOwners(dir string, base uint32, r idmap.Range) error {
	return filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		shift := func(id uint32) int {
			if id >= base {
				return int(r.Base + (id-base)%idRangeSize)
			}
			return int(r.Base + min(id, idRangeSize-1))
		}
		uid, gid := shift(st.Uid), shift(st.Gid)
		if uint32(uid) == st.Uid && uint32(gid) == st.Gid {
			return nil
		}
		mode := fi.Mode()
		if err := os.Lchown(p, uid, gid); err != nil {
			return err
		}
		// chown clears setuid and setgid bits; the snapshot had them.
		if mode&(os.ModeSetuid|os.ModeSetgid) != 0 && mode&os.ModeSymlink == 0 {
			return os.Chmod(p, mode)
		}
		return nil
	})
}

func isMountPoint(p string) (bool, error) {
	var st, pst syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return false, err
	}
	if err := syscall.Lstat(filepath.Dir(p), &pst); err != nil {
		return false, err
	}
	if st.Dev != pst.Dev {
		return true, nil
	}
	// Same device: a bind of the same filesystem; ask mountinfo.
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 4 && unescapeMount(f[4]) == p {
			return true, nil
		}
	}
	return false, nil
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// unmountImage undoes mountImage (and what is left of it after a crash).
func unmountImage(dir string) error {
	var errs []error
	um := func(p string) {
		for {
			err := unix.Unmount(p, unix.MNT_DETACH)
			if err != nil {
				if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
				}
				return
			}
		}
	}
	um(filepath.Join(dir, "merged"))
	um(filepath.Join(dir, "lower"))
	entries, _ := os.ReadDir(filepath.Join(dir, "lowers"))
	for _, e := range entries {
		um(filepath.Join(dir, "lowers", e.Name()))
	}
	return errors.Join(errs...)
}

// startContainer starts a container sandbox's container.
func (s *Service) startContainer(ctx context.Context, b *box) error {
	cfg := container.Config{
		ID:       b.cid,
		Bundle:   s.bundle(b.cid),
		Rootfs:   b.merged(),
		Range:    b.img.Range,
		Init:     s.cfg.CatatonitPath,
		Hostname: "sandbox",
		Network:  b.network,
		Env:      containerEnv(b.img.Config),
		Seccomp:  s.ociSeccomp,
		Mounts: []specs.Mount{
			// The X socket and cookie of the session's display are placed
			// here from the host once it has one (shareDisplay).
			{Destination: "/tmp/.X11-unix", Type: "bind", Source: filepath.Join(s.bundle(b.cid) + ".x11"), Options: []string{"rbind", "rslave", "nosuid", "nodev", "noexec"}},
		},
	}
	if b.cg != nil {
		cfg.CgroupsPath = b.cg.Path()
	}
	x11 := s.bundle(b.cid) + ".x11"
	if err := s.prepareX11(x11, b.img.Range); err != nil {
		return err
	}
	if err := s.runtime().Create(ctx, cfg); err != nil {
		_ = cleanupX11(x11)
		if errors.Is(err, container.ErrNoRunc) {
			return failf(errMissingProgram, "this node cannot run sessions from images: %s is not installed (Debian package runc)", s.runtime().Bin())
		}
		if errors.Is(err, container.ErrUnusableImage) {
			return failf(errPrecondition, "image %s: %w", b.img.Ref, err)
		}
		return err
	}
	if b.network {
		if err := s.attachNetwork(ctx, b); err != nil {
			_ = s.runtime().Delete(context.WithoutCancel(ctx), b.cid)
			_ = container.Cleanup(s.bundle(b.cid))
			_ = cleanupX11(x11)
			return err
		}
	}
	return nil
}

// attachNetwork connects a container's network namespace to the host's in
// user mode (slirp4netns), as a bubblewrap sandbox's commands are.
func (s *Service) attachNetwork(ctx context.Context, b *box) error {
	st, err := s.runtime().State(ctx, b.cid)
	if err != nil {
		return err
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", st.Pid))
	if err != nil {
		return fmt.Errorf("open the container's network namespace: %w", err)
	}
	defer ns.Close()
	deny, err := jail.HostAddrs()
	if err != nil {
		return err
	}
	sl, err := (&jail.Network{Slirp: s.cfg.SlirpPath, Hardened: true, Deny: deny}).Attach(ns)
	if err != nil {
		return err
	}
	b.stopNetwork()
	b.slirp = sl
	return nil
}

// stopNetwork ends a container sandbox's slirp4netns, if any.
func (b *box) stopNetwork() {
	if b.slirp != nil {
		b.slirp.Stop()
		b.slirp = nil
	}
}

// prepareX11 makes the host directory seen as /tmp/.X11-unix in a
// container: a shared mount, so that a socket bound into it later appears
// inside the running container too.
func (s *Service) prepareX11(dir string, r idmap.Range) error {
	if err := os.Mkdir(dir, 0o1777); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Chmod(dir, 0o1777); err != nil {
		return err
	}
	if mounted, _ := isMountPoint(dir); !mounted {
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=1m"); err != nil {
			return fmt.Errorf("x11 dir: %w", err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("x11 dir: %w", err)
	}
	return nil
}

func cleanupX11(dir string) error {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = unix.Unmount(filepath.Join(dir, e.Name()), unix.MNT_DETACH)
	}
	_ = unix.Unmount(dir, unix.MNT_DETACH)
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// xauthName is the cookie's file in the container's /tmp/.X11-unix.
const xauthName = ".Xauthority-deskgrid"

// shareDisplay binds the session's X socket into its container and copies
// its cookie there, owned by the container's user; it returns DISPLAY and
// XAUTHORITY for the command. sock is the host's socket as waitXSocket
// found it: the bind is of that very socket, and what the container sees
// at /tmp/.X11-unix/X<n> is checked to be it before any program is told
// to use it.
func (s *Service) shareDisplay(b *box, sock string, sockSt unix.Stat_t, n, xauth string, uid, gid int) ([]string, error) {
	dir := s.bundle(b.cid) + ".x11"
	dst := filepath.Join(dir, "X"+n)
	b.xmu.Lock()
	defer b.xmu.Unlock()
	if err := bindXSocket(sock, sockSt, dst); err != nil {
		return nil, err
	}
	if err := s.checkXSocketInContainer(b, n, sockSt); err != nil {
		return nil, err
	}
	env := []string{"DISPLAY=:" + n}
	if xauth != "" {
		data, err := os.ReadFile(xauth)
		if err != nil {
			return nil, failf(errPrecondition, "session %q's X authority file is missing: %v", b.id, err)
		}
		tmp := filepath.Join(dir, xauthName+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return nil, err
		}
		if err := os.Chown(tmp, int(b.img.Range.Host(uint32(uid))), int(b.img.Range.Host(uint32(gid)))); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, filepath.Join(dir, xauthName)); err != nil {
			return nil, err
		}
		env = append(env, "XAUTHORITY=/tmp/.X11-unix/"+xauthName)
	}
	return env, nil
}

// bindXSocket makes dst (in a container's X11 dir on the host) the X
// socket sock. A bind already there of another inode (the server made its
// socket again, or something took its place) is replaced.
func bindXSocket(sock string, sockSt unix.Stat_t, dst string) error {
	if mounted, _ := isMountPoint(dst); mounted {
		var st unix.Stat_t
		if unix.Stat(dst, &st) == nil && sameFile(st, sockSt) {
			return nil
		}
		if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("bind the X socket: replace a stale one: %w", err)
		}
	}
	// The mount point: an empty file, only ever seen with the socket on it
	// (the bind follows before any program is given the display).
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW, 0o666)
	if err != nil {
		return fmt.Errorf("bind the X socket: %w", err)
	}
	f.Close()
	if err := unix.Mount(sock, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the X socket: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dst, &st); err != nil || !sameFile(st, sockSt) {
		// The socket was replaced between the wait and the bind.
		_ = unix.Unmount(dst, unix.MNT_DETACH)
		return failf(errUnavailable, "the X socket %s changed while it was being shared; try again", sock)
	}
	return nil
}

// checkXSocketInContainer makes sure the running container sees the X
// socket at /tmp/.X11-unix/X<n>: the bind reaches it by mount propagation,
// and a program told DISPLAY=:n finding anything else there (an empty
// file) fails to open the display.
func (s *Service) checkXSocketInContainer(b *box, n string, sockSt unix.Stat_t) error {
	data, err := os.ReadFile(filepath.Join(s.bundle(b.cid), "init.pid"))
	if err != nil {
		return fmt.Errorf("session %s's container: %w", b.id, err)
	}
	pid := strings.TrimSpace(string(data))
	var st unix.Stat_t
	err = unix.Stat(filepath.Join("/proc", pid, "root", "tmp", ".X11-unix", "X"+n), &st)
	if err == nil && sameFile(st, sockSt) {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("found mode %o, inode %d instead of the socket's inode %d", st.Mode, st.Ino, sockSt.Ino)
	}
	return failf(errUnavailable, "session %q's X socket did not reach its container: %v", b.id, err)
}

func sameFile(a, b unix.Stat_t) bool { return a.Dev == b.Dev && a.Ino == b.Ino }

// xSocketWait bounds the wait for a display's X socket to be there and be
// a socket: a display reported ready has it already, unless its server is
// still making it (or making it again).
const xSocketWait = 2 * time.Second

// waitXSocket waits until sock is a unix socket and returns what it is. A
// path that stays missing or stays something else (a file left in its
// place) is FailedPrecondition: binding that would give the session's
// programs a display they cannot open.
func waitXSocket(ctx context.Context, sessionID, display, sock string) (unix.Stat_t, error) {
	deadline := time.Now().Add(xSocketWait)
	delay := time.Millisecond
	for {
		var st unix.Stat_t
		err := unix.Lstat(sock, &st)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
			return st, nil
		}
		if err == nil {
			err = fmt.Errorf("%s is not a socket (mode %o)", sock, st.Mode)
		}
		if time.Now().After(deadline) {
			return st, failf(errPrecondition, "session %q's display %s has no X socket on this node: %v", sessionID, display, err)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// SessionLabel names an image's desktop program; a container sandbox
// gives it to its commands as DESKGRID_SESSION.
const SessionLabel = "org.deskgrid.session"

// containerEnv is the image's environment with a PATH, a TERM and the
// image's desktop program.
func containerEnv(c image.Config) []string {
	out := slices.Clone(c.Env)
	if p := c.Labels[SessionLabel]; p != "" {
		out = append(out, "DESKGRID_SESSION="+p)
	}
	has := func(k string) bool {
		for _, kv := range out {
			if strings.HasPrefix(kv, k+"=") {
				return true
			}
		}
		return false
	}
	if !has("PATH") {
		out = append(out, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	if !has("TERM") {
		out = append(out, "TERM=dumb")
	}
	return out
}

// maxAccountsFile bounds what imageUser reads of /etc/passwd or /etc/group.
const maxAccountsFile = 1 << 20

// readImageFile reads the file at rel in a session's root filesystem as the
// session would: links resolved inside it, never to the node's files (its
// root may make /etc/passwd a link anywhere); only a regular file, opened
// without blocking (a FIFO there would hang the caller) and read up to
// maxAccountsFile. Anything else reads as empty.
func readImageFile(rootfs, rel string) []byte {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil
	}
	defer root.Close()
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	data, _ := io.ReadAll(io.LimitReader(f, maxAccountsFile))
	return data
}

// imageUser resolves the image's user ("uid[:gid]" or names from the
// image's /etc/passwd and /etc/group) to ids inside the container.
func imageUser(rootfs, user string) (uid, gid int, err error) {
	if user == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	uid, gid = -1, -1
	if n, err := strconv.Atoi(u); err == nil {
		uid = n
	}
	pw := readImageFile(rootfs, "etc/passwd")
	for _, line := range strings.Split(string(pw), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 {
			continue
		}
		if f[0] == u || uid >= 0 && f[2] == strconv.Itoa(uid) {
			uid, _ = strconv.Atoi(f[2])
			if !hasGroup {
				gid, _ = strconv.Atoi(f[3])
			}
			break
		}
	}
	if uid < 0 {
		return 0, 0, fmt.Errorf("the image's user %q is not in its /etc/passwd", u)
	}
	if hasGroup {
		if n, err := strconv.Atoi(g); err == nil {
			gid = n
		} else {
			gr := readImageFile(rootfs, "etc/group")
			for _, line := range strings.Split(string(gr), "\n") {
				f := strings.Split(line, ":")
				if len(f) >= 3 && f[0] == g {
					gid, _ = strconv.Atoi(f[2])
				}
			}
			if gid < 0 {
				return 0, 0, fmt.Errorf("the image's group %q is not in its /etc/group", g)
			}
		}
	}
	if gid < 0 {
		gid = uid
	}
	if uid >= idRangeSize || gid >= idRangeSize {
		return 0, 0, fmt.Errorf("the image's user %q is outside the session's %d ids", user, idRangeSize)
	}
	return uid, gid, nil
}

// removeContainer stops and removes a container sandbox's container and
// its mounts; what is already gone is no error.
func (s *Service) removeContainer(ctx context.Context, id, dir string) error {
	var errs []error
	if err := s.runtime().Delete(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := container.Cleanup(s.bundle(id)); err != nil {
		errs = append(errs, err)
	}
	if err := cleanupX11(s.bundle(id) + ".x11"); err != nil {
		errs = append(errs, err)
	}
	if err := unmountImage(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// lowerID names what a sandbox's upper layer lies on, as its snapshots
// record it: the lower dir, or the image's digest.
func (b *box) lowerID() string {
	if b.img != nil {
		return "image:" + b.img.Digest
	}
	return b.lower
}

// unmountRoot takes a sandbox's root filesystem down so that its upper
// layer can change: a container sandbox's container goes first, its
// processes with it (the started programs are kept in b.restart, for the
// caller's unlock to start again once the container is back).
func (s *Service) unmountRoot(ctx context.Context, b *box) error {
	if b.img == nil {
		return b.driver.Unmount(ctx, b.merged())
	}
	b.stopShell()
	b.stopNetwork()
	progs := b.endPrograms()
	b.pmu.Lock()
	b.restart = append(b.restart, progs...)
	b.pmu.Unlock()
	if err := s.runtime().Delete(ctx, b.cid); err != nil {
		return err
	}
	if err := container.Cleanup(s.bundle(b.cid)); err != nil {
		return err
	}
	if err := cleanupX11(s.bundle(b.cid) + ".x11"); err != nil {
		return err
	}
	if err := unix.Unmount(b.merged(), unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %s: %w", b.merged(), err)
	}
	return nil
}

// remountContainer mounts a container sandbox's root filesystem again and
// starts its container.
func (s *Service) remountContainer(ctx context.Context, b *box) error {
	if err := s.mountImage(b); err != nil {
		return fmt.Errorf("remount session %s: %w", b.id, err)
	}
	return s.startContainer(ctx, b)
}
