package jail

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The policy is data (Policy) from which two forms are generated: the BPF
// program bwrap's --seccomp loads (SeccompFilter) and the seccomp section of
// an OCI runtime spec (OCISeccomp). Both allow every call no rule names, so
// a rule is all it takes to refuse something in both.
//
// The BPF form is written with golang.org/x/net/bpf rather than a seccomp
// policy library because the policy needs several errnos: EPERM for what a
// sandbox may not do, EINVAL where that is what programs expect, and ENOSYS
// for clone3, whose flags a filter cannot read (they are behind a pointer),
// so that libc falls back to clone, whose flags it can.

// Rule refuses the named system calls with Errno when every condition in
// Args holds (always, when Args is empty).
type Rule struct {
	Names []string
	Errno unix.Errno
	// Args are ANDed; at most one per argument index, the limit libseccomp
	// (and so every OCI runtime) puts on one rule. Several rules on one call
	// are ORed.
	Args []ArgCond
}

// ArgCond holds when the low 32 bits of argument Index, masked with Mask,
// equal Value. Every argument the policy inspects is a C int or unsigned
// int, which the kernel truncates to 32 bits, so the high half is ignored
// on purpose: a value with junk above bit 31 is the same call to the kernel.
// In OCI terms it is SCMP_CMP_MASKED_EQ with value Mask and valueTwo Value.
type ArgCond struct {
	Index uint
	Mask  uint32
	Value uint32
}

// Namespace flags of clone and unshare: no new namespaces inside a sandbox.
// A new user namespace would give the program every capability again
// inside it, and the others much kernel attack surface with them.
var (
	cloneNamespaces   = []uint32{unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET}
	unshareNamespaces = append(slices.Clone(cloneNamespaces), unix.CLONE_NEWTIME)
)

// Personality values a sandbox may set, as Docker's default profile
// allows: PER_LINUX (0), PER_LINUX32 (0x8), UNAME26 (0x20000) and their
// combination. Every other bit is refused on its own, which refuses
// READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE and the foreign execution domains.
// The query personality(0xffffffff) is refused too: one comparison per
// argument cannot tell it from a value with every flag set.
const personalityAllowedBits = 0x0008 | 0x20000

const (
	afVsock      = unix.AF_VSOCK
	afNetlink    = unix.AF_NETLINK
	netlinkAudit = unix.NETLINK_AUDIT
)

// Policy returns the rules, in the order the BPF form tests them.
func Policy() []Rule {
	rules := []Rule{
		// Tracing and reading other processes.
		{Names: []string{"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "pidfd_getfd"}, Errno: unix.EPERM},
		// The mount API.
		{Names: []string{"mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr"}, Errno: unix.EPERM},
		// Kernel and system administration.
		{Names: []string{"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module", "reboot",
			"swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup", "iopl", "ioperm",
			"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
			"lookup_dcookie", "fanotify_init", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl"}, Errno: unix.EPERM},
		// eBPF, perf, userfaultfd and io_uring: large kernel surfaces with a
		// history of privilege escalations.
		{Names: []string{"bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register"}, Errno: unix.EPERM},
		// Kernel keyrings, handle-based opens, joining namespaces.
		{Names: []string{"keyctl", "add_key", "request_key", "open_by_handle_at", "name_to_handle_at", "setns"}, Errno: unix.EPERM},
		// clone3 hides its flags behind a pointer: ENOSYS makes libc use clone.
		{Names: []string{"clone3"}, Errno: unix.ENOSYS},
		// Host-to-VM sockets reach the hypervisor side of a VM node.
		{Names: []string{"socket"}, Errno: unix.EPERM, Args: []ArgCond{{Index: 0, Mask: 0xffffffff, Value: afVsock}}},
		// The audit netlink socket; EINVAL is what programs (and Podman's
		// profile) expect when audit is unavailable.
		{Names: []string{"socket"}, Errno: unix.EINVAL, Args: []ArgCond{{Index: 0, Mask: 0xffffffff, Value: afNetlink}, {Index: 2, Mask: 0xffffffff, Value: netlinkAudit}}},
	}
	for _, f := range cloneNamespaces {
		rules = append(rules, Rule{Names: []string{"clone"}, Errno: unix.EPERM, Args: []ArgCond{{Index: 0, Mask: f, Value: f}}})
	}
	for _, f := range unshareNamespaces {
		rules = append(rules, Rule{Names: []string{"unshare"}, Errno: unix.EPERM, Args: []ArgCond{{Index: 0, Mask: f, Value: f}}})
	}
	for bit := range 32 {
		f := uint32(1) << bit
		if f&personalityAllowedBits == 0 {
			rules = append(rules, Rule{Names: []string{"personality"}, Errno: unix.EPERM, Args: []ArgCond{{Index: 0, Mask: f, Value: f}}})
		}
	}
	return rules
}

// archOnly are calls that exist on some architectures only; a rule naming
// one is left out where it does not exist.
var archOnly = map[string]bool{"iopl": true, "ioperm": true, "uselib": true, "ustat": true, "sysfs": true, "_sysctl": true, "create_module": true}

type arch struct {
	audit uint32
	oci   specs.Arch
	nrs   map[string]uint32
	x32   bool // x86-64: refuse the x32 ABI, which has its own numbers
}

// resolve returns the numbers of a rule's calls on a, checking the rule is
// one both forms can express.
func (a arch) resolve(r Rule) ([]uint32, []string, error) {
	if len(r.Names) == 0 || r.Errno == 0 {
		return nil, nil, fmt.Errorf("seccomp: rule %v names no call or no errno", r.Names)
	}
	seen := map[uint]bool{}
	for _, c := range r.Args {
		if c.Index > 5 || seen[c.Index] {
			return nil, nil, fmt.Errorf("seccomp: rule %v: argument %d is out of range or compared twice", r.Names, c.Index)
		}
		if c.Value&^c.Mask != 0 {
			return nil, nil, fmt.Errorf("seccomp: rule %v: value %#x has bits outside mask %#x", r.Names, c.Value, c.Mask)
		}
		seen[c.Index] = true
	}
	var nrs []uint32
	var names []string
	for _, name := range r.Names {
		nr, ok := a.nrs[name]
		switch {
		case ok:
			nrs = append(nrs, nr)
			names = append(names, name)
		case !archOnly[name]:
			return nil, nil, fmt.Errorf("seccomp: unknown system call %q on %s", name, runtime.GOARCH)
		}
	}
	return nrs, names, nil
}

// checkPolicy refuses what an OCI runtime would resolve differently from
// the BPF program: a call refused both always and under conditions (in
// libseccomp the unconditional rule wins), and two rules with different
// errnos that may match one call (libseccomp picks one, the BPF the first).
func checkPolicy(rules []Rule) error {
	byName := map[string][]Rule{}
	for _, r := range rules {
		for _, n := range r.Names {
			byName[n] = append(byName[n], r)
		}
	}
	for name, rs := range byName {
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				if len(a.Args) == 0 || len(b.Args) == 0 {
					return fmt.Errorf("seccomp: %s is refused both always and under conditions", name)
				}
				if a.Errno != b.Errno && !disjoint(a, b) {
					return fmt.Errorf("seccomp: two rules may match one %s call with different errnos", name)
				}
			}
		}
	}
	return nil
}

// disjoint reports whether no call can satisfy both rules: they test one
// argument under one mask for different values.
func disjoint(a, b Rule) bool {
	for _, x := range a.Args {
		for _, y := range b.Args {
			if x.Index == y.Index && x.Mask == y.Mask && x.Value != y.Value {
				return true
			}
		}
	}
	return false
}

const (
	offNr   = 0
	offArch = 4
	offArgs = 16 // args[i] at offArgs+8*i; its low 32 bits first on a little-endian machine
	x32Bit  = 0x40000000
)

func errnoRet(e unix.Errno) bpf.RetConstant {
	return bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(e)}
}

// SeccompFilter returns the policy compiled for this machine in the form
// bwrap's --seccomp reads: an array of struct sock_filter.
func SeccompFilter() ([]byte, error) {
	prog, err := seccompProgram()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(prog)
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

// seccompProgram is the BPF form of the policy. Every test returns where it
// matched, so no jump is long, however many rules there are.
func seccompProgram() ([]bpf.Instruction, error) {
	a, err := hostArch()
	if err != nil {
		return nil, err
	}
	rules := Policy()
	if err := checkPolicy(rules); err != nil {
		return nil, err
	}
	loadNr := bpf.LoadAbsolute{Off: offNr, Size: 4}
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		// Another architecture's numbers would slip past the rules: refuse all.
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: a.audit, SkipTrue: 1},
		errnoRet(unix.EPERM),
		loadNr,
	}
	if a.x32 {
		p = append(p, bpf.JumpIf{Cond: bpf.JumpLessThan, Val: x32Bit, SkipTrue: 1}, errnoRet(unix.ENOSYS))
	}
	for _, r := range rules {
		nrs, _, err := a.resolve(r)
		if err != nil {
			return nil, err
		}
		for _, nr := range nrs {
			if len(r.Args) == 0 {
				p = append(p, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: nr, SkipTrue: 1}, errnoRet(r.Errno))
				continue
			}
			// Not this call: skip the block. A condition that fails skips
			// to the reload of the number the conditions overwrote.
			n := len(r.Args)
			p = append(p, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: nr, SkipTrue: uint8(3*n + 2)})
			for i, c := range r.Args {
				p = append(p,
					bpf.LoadAbsolute{Off: uint32(offArgs + 8*c.Index), Size: 4},
					bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: c.Mask},
					bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: c.Value, SkipTrue: uint8(3*(n-i-1) + 1)},
				)
			}
			p = append(p, errnoRet(r.Errno), loadNr)
		}
	}
	p = append(p, bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW})
	return p, nil
}

// OCISeccomp returns the policy as the seccomp section of an OCI runtime
// spec, for this machine's architecture: allow by default, and one syscall
// entry per rule with its errno and argument conditions.
func OCISeccomp() (*specs.LinuxSeccomp, error) {
	a, err := hostArch()
	if err != nil {
		return nil, err
	}
	rules := Policy()
	if err := checkPolicy(rules); err != nil {
		return nil, err
	}
	out := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: []specs.Arch{a.oci},
	}
	for _, r := range rules {
		_, names, err := a.resolve(r)
		if err != nil {
			return nil, err
		}
		errno := uint(r.Errno)
		sc := specs.LinuxSyscall{Names: names, Action: specs.ActErrno, ErrnoRet: &errno}
		for _, c := range r.Args {
			sc.Args = append(sc.Args, specs.LinuxSeccompArg{Index: c.Index, Value: uint64(c.Mask), ValueTwo: uint64(c.Value), Op: specs.OpMaskedEqual})
		}
		out.Syscalls = append(out.Syscalls, sc)
	}
	return out, nil
}
