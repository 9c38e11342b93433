package idmap

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestIdmappedMountShiftsOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("idmapped mounts need root; the tests run as root on deskgrid's machines")
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "root-file"), []byte("x"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "root-file"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "user-file"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(src, "user-file"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	r := Range{Base: 3_000_000, Size: 65536}
	ns, err := UserNS(r, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	dst := t.TempDir()
	if err := Mount(src, dst, ns, Options{ReadOnly: true, NoSuid: true, NoDev: true}); err != nil {
		t.Fatal(err)
	}
	defer Unmount(dst)

	for name, want := range map[string]uint32{"root-file": r.Host(0), "user-file": r.Host(1000)} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dst, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != want || st.Gid != want {
			t.Errorf("%s through the idmapped mount is owned by %d:%d, want %d:%d", name, st.Uid, st.Gid, want, want)
		}
		// The files themselves are untouched.
		if err := syscall.Stat(filepath.Join(src, name), &st); err != nil {
			t.Fatal(err)
		}
		if r.Contains(st.Uid) {
			t.Errorf("%s on disk changed owner to %d", name, st.Uid)
		}
	}
	if err := os.WriteFile(filepath.Join(dst, "new"), nil, 0o644); err == nil {
		t.Error("wrote through a read-only idmapped mount")
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(dst, &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Flags&syscall.MS_NOSUID == 0 || sfs.Flags&syscall.MS_NODEV == 0 {
		t.Errorf("mount flags %#x lack nosuid/nodev", sfs.Flags)
	}
	if err := Unmount(dst); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, "root-file")); !os.IsNotExist(err) {
		t.Errorf("after Unmount the tree is still visible: %v", err)
	}
}

func TestRangeRefusesHostRoot(t *testing.T) {
	for _, r := range []Range{{0, 65536}, {1_000_000, 0}, {1<<32 - 10, 65536}} {
		if _, err := UserNS(r, ""); err == nil {
			t.Errorf("UserNS(%v) made a namespace", r)
		}
	}
}
