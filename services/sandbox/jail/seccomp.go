package jail

import (
	"encoding/binary"
	"fmt"
	"runtime"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The filter is written with golang.org/x/net/bpf rather than a seccomp
// policy library because it needs two different errnos: EPERM for what a
// sandbox may not do, and ENOSYS for clone3, whose flags a filter cannot
// read (they are behind a pointer), so that libc falls back to clone,
// whose flags it can.

// Denied are the system calls a sandboxed program gets EPERM for: kernel
// and system administration, tracing and reading other processes, kernel
// keyrings, eBPF and perf, and the mount API.
var Denied = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
	"bpf", "perf_event_open", "userfaultfd",
	"keyctl", "add_key", "request_key",
	"swapon", "swapoff", "acct", "quotactl",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"open_by_handle_at", "name_to_handle_at",
	"setns",
}

type arch struct {
	audit uint32
	nrs   map[string]uint32
	x32   bool // x86-64: refuse the x32 ABI, which has its own numbers
}

const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits of args[0] on a little-endian machine
	x32Bit  = 0x40000000
)

// SeccompFilter returns the compiled filter in the form bwrap's --seccomp
// reads: an array of struct sock_filter.
func SeccompFilter() ([]byte, error) {
	a, err := hostArch()
	if err != nil {
		return nil, err
	}
	allow := bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW}
	eperm := bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)}
	enosys := bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)}

	// Every branch below jumps to one of three returns at the end; skips are
	// computed once the body's length is known.
	type jump struct {
		at     int
		target int // 0 allow, 1 eperm, 2 enosys
	}
	var body []bpf.Instruction
	var jumps []jump
	to := func(ins bpf.JumpIf, target int) {
		jumps = append(jumps, jump{len(body), target})
		body = append(body, ins)
	}
	body = append(body, bpf.LoadAbsolute{Off: offArch, Size: 4})
	// Another architecture's numbers would slip past the list: refuse all.
	to(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: a.audit}, 1)
	body = append(body, bpf.LoadAbsolute{Off: offNr, Size: 4})
	if a.x32 {
		to(bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit}, 2)
	}
	for _, name := range Denied {
		nr, ok := a.nrs[name]
		if !ok {
			return nil, fmt.Errorf("seccomp: unknown system call %q on %s", name, runtime.GOARCH)
		}
		to(bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr}, 1)
	}
	if nr, ok := a.nrs["clone3"]; ok {
		to(bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr}, 2)
	}
	// No new user namespace: it would give the program every capability
	// again inside it, and much kernel attack surface with them.
	for _, name := range []string{"unshare", "clone"} {
		nr := a.nrs[name]
		body = append(body, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: nr, SkipTrue: 3})
		body = append(body, bpf.LoadAbsolute{Off: offArg0, Size: 4})
		to(bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.CLONE_NEWUSER}, 1)
		body = append(body, bpf.LoadAbsolute{Off: offNr, Size: 4}) // restore for the next test
	}
	end := len(body)
	body = append(body, allow, eperm, enosys)
	for _, j := range jumps {
		ins := body[j.at].(bpf.JumpIf)
		skip := end + j.target - j.at - 1
		if skip > 255 {
			return nil, fmt.Errorf("seccomp: filter too long")
		}
		ins.SkipTrue = uint8(skip)
		body[j.at] = ins
	}
	raw, err := bpf.Assemble(body)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.LittleEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.LittleEndian.AppendUint32(out, r.K)
	}
	return out, nil
}
