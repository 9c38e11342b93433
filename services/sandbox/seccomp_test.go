package sandbox

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// syscallProbe is a python3 script that makes one raw system call and
// prints "ok" or "-1 <errno>".
func syscallProbe(nr int, args string) string {
	return fmt.Sprintf(`python3 -c "
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)
r = libc.syscall(%d, %s)
print('ok' if r >= 0 else '%%d %%d' %% (r, ctypes.get_errno()))
"`, nr, args)
}

func TestSeccompFilter(t *testing.T) {
	probe := map[string]string{
		"userns": "unshare -U true && echo allowed",
		"ptrace": `python3 -c "import ctypes; libc = ctypes.CDLL(None, use_errno=True); print(libc.ptrace(0, 0, 0, 0), ctypes.get_errno())"`,
		"thread": `python3 -c "import threading; t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()"`,
		// The calls the filter refuses beyond Docker's: io_uring, host-VM
		// sockets, the audit socket, personalities Docker does not allow.
		"io_uring_setup":    syscallProbe(unix.SYS_IO_URING_SETUP, "1, buf"),
		"io_uring_enter":    syscallProbe(unix.SYS_IO_URING_ENTER, "-1, 0, 0, 0, 0, 0"),
		"io_uring_register": syscallProbe(unix.SYS_IO_URING_REGISTER, "-1, 0, 0, 0"),
		"vsock":             syscallProbe(unix.SYS_SOCKET, fmt.Sprintf("%d, %d, 0", unix.AF_VSOCK, unix.SOCK_STREAM)),
		"netlink_audit":     syscallProbe(unix.SYS_SOCKET, fmt.Sprintf("%d, %d, %d", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)),
		"read_implies_exec": syscallProbe(unix.SYS_PERSONALITY, "0x0400000"),
		"addr_no_randomize": syscallProbe(unix.SYS_PERSONALITY, "0x0040000"),
		"personality_linux": syscallProbe(unix.SYS_PERSONALITY, "0"),
		"netlink_route":     syscallProbe(unix.SYS_SOCKET, fmt.Sprintf("%d, %d, %d", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)),
	}
	run := func(t *testing.T, noSeccomp bool) map[string]execResult {
		cfg := testConfig(t)
		cfg.NoSeccomp = noSeccomp
		h := newHarness(t, cfg, Deps{})
		h.create(t, "sc", "")
		out := map[string]execResult{}
		for name, script := range probe {
			out[name] = h.mustExec(t, "sc", "sh", "-c", script)
		}
		return out
	}
	on := run(t, false)
	if r := on["userns"]; r.exit.GetExitCode() == 0 || !strings.Contains(r.stderr, "Operation not permitted") {
		t.Errorf("new user namespace under the filter: %+v", r)
	}
	if r := on["ptrace"]; r.stdout != "-1 1\n" {
		t.Errorf("ptrace under the filter: %+v", r)
	}
	// clone3 is refused with ENOSYS, so libc falls back to clone.
	if r := on["thread"]; r.stdout != "thread\n" {
		t.Errorf("threads under the filter: %+v", r)
	}
	for name, want := range map[string]string{
		"io_uring_setup":    "-1 1",
		"io_uring_enter":    "-1 1",
		"io_uring_register": "-1 1",
		"vsock":             "-1 1",
		"netlink_audit":     "-1 22",
		"read_implies_exec": "-1 1",
		"addr_no_randomize": "-1 1",
		"personality_linux": "ok",
		"netlink_route":     "ok",
	} {
		if r := on[name]; strings.TrimSpace(r.stdout) != want {
			t.Errorf("%s under the filter: %+v, want %q", name, r, want)
		}
	}
	// The same probes without the filter show what it stops.
	off := run(t, true)
	if r := off["userns"]; r.stdout != "allowed\n" {
		t.Errorf("new user namespace without the filter: %+v (the comparison is void)", r)
	}
	for _, name := range []string{"io_uring_setup", "netlink_audit", "read_implies_exec"} {
		if r := off[name]; strings.TrimSpace(r.stdout) != "ok" {
			t.Errorf("%s without the filter: %+v (the comparison is void)", name, r)
		}
	}
}
