package jail

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestOCISeccompUnderCrun runs a container under crun with the OCI form of
// the policy and checks the kernel refuses what the policy refuses.
func TestOCISeccompUnderCrun(t *testing.T) {
	crun, err := exec.LookPath("crun")
	if err != nil {
		t.Skip("crun is not installed (Debian package crun)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the container runs as root here")
	}
	sec, err := OCISeccomp()
	if err != nil {
		t.Fatal(err)
	}
	probes := []struct {
		name string
		nr   int
		args string
		want string
	}{
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, "1, buf", "-1 1"},
		{"vsock", unix.SYS_SOCKET, fmt.Sprintf("%d, %d, 0", unix.AF_VSOCK, unix.SOCK_STREAM), "-1 1"},
		{"netlink_audit", unix.SYS_SOCKET, fmt.Sprintf("%d, %d, %d", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT), "-1 22"},
		{"read_implies_exec", unix.SYS_PERSONALITY, "0x0400000", "-1 1"},
		{"clone3", unix.SYS_CLONE3, "0, 0", "-1 38"},
		{"unshare_user", unix.SYS_UNSHARE, fmt.Sprint(unix.CLONE_NEWUSER), "-1 1"},
		{"personality_linux", unix.SYS_PERSONALITY, "0", "ok"},
		{"netlink_route", unix.SYS_SOCKET, fmt.Sprintf("%d, %d, %d", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE), "ok"},
	}
	var script strings.Builder
	script.WriteString("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = ctypes.create_string_buffer(256)\n")
	for _, p := range probes {
		fmt.Fprintf(&script, "r = libc.syscall(%d, %s)\nprint(%q, 'ok' if r >= 0 else '%%d %%d' %% (r, ctypes.get_errno()))\n", p.nr, p.args, p.name)
	}
	run := func(t *testing.T, sec *specs.LinuxSeccomp) map[string]string {
		bundle := t.TempDir()
		rootfs := filepath.Join(bundle, "rootfs")
		for _, d := range []string{"usr", "proc", "dev", "tmp", "etc"} {
			if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
			if err := os.Symlink("usr/"+l, filepath.Join(rootfs, l)); err != nil {
				t.Fatal(err)
			}
		}
		spec := specs.Spec{
			// Debian's crun 1.8 refuses versions newer than it knows.
			Version:  "1.0.2",
			Root:     &specs.Root{Path: rootfs, Readonly: true},
			Hostname: "probe",
			Process: &specs.Process{
				Args:            []string{"/usr/bin/python3", "-c", script.String()},
				Env:             []string{"PATH=/usr/bin:/bin"},
				Cwd:             "/",
				NoNewPrivileges: true,
				Capabilities:    &specs.LinuxCapabilities{},
			},
			Mounts: []specs.Mount{
				{Destination: "/proc", Type: "proc", Source: "proc"},
				{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755", "size=1m"}},
				{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "size=1m"}},
				{Destination: "/usr", Type: "bind", Source: "/usr", Options: []string{"rbind", "ro"}},
			},
			Linux: &specs.Linux{
				Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.NetworkNamespace}},
				Seccomp:    sec,
			},
		}
		cfg, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		state := t.TempDir()
		id := fmt.Sprintf("deskgrid-seccomp-%d-%d", os.Getpid(), time.Now().UnixNano())
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		t.Cleanup(func() { _ = exec.Command(crun, "--root", state, "delete", "--force", id).Run() })
		var out, stderr bytes.Buffer
		// crun refuses a cgroup v1 host whose cgroup2 mount holds a
		// controller ("hybrid"); the container needs no cgroup here, so crun
		// runs in a mount namespace of its own without that mount.
		cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "sh", "-c",
			`if mountpoint -q /sys/fs/cgroup/unified; then umount -l /sys/fs/cgroup/unified; fi; exec "$@"`, "sh",
			crun, "--root", state, "--cgroup-manager=disabled", "run", "--bundle", bundle, id)
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("crun run: %v\n%s%s", err, out.String(), stderr.String())
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			name, result, _ := strings.Cut(line, " ")
			got[name] = result
		}
		return got
	}
	got := run(t, sec)
	for _, p := range probes {
		if got[p.name] != p.want {
			t.Errorf("%s under crun with the policy: %q, want %q", p.name, got[p.name], p.want)
		}
	}
	// Without the policy the same container makes these calls.
	off := run(t, nil)
	for _, name := range []string{"io_uring_setup", "netlink_audit", "read_implies_exec"} {
		if off[name] != "ok" {
			t.Errorf("%s under crun without the policy: %q (the comparison is void)", name, off[name])
		}
	}
}
