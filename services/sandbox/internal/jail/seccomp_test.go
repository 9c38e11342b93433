package jail

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// call is one system call as a filter sees it.
type call struct {
	name string
	args [6]uint64
}

func (c call) String() string { return fmt.Sprintf("%s%#x", c.name, c.args[:3]) }

// decision is what a filter answers: 0 allows, else the errno.
type decision = unix.Errno

// bpfDecides runs the BPF form on c's struct seccomp_data.
func bpfDecides(t *testing.T, vm *bpf.VM, a arch, c call) decision {
	t.Helper()
	nr, ok := a.nrs[c.name]
	if !ok {
		t.Fatalf("no number for %s", c.name)
	}
	// The kernel loads 32-bit words of seccomp_data in the machine's order
	// (low half of each argument first here); x/net/bpf's VM loads them
	// big-endian, so each word is laid out for it.
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[offNr:], nr)
	binary.BigEndian.PutUint32(data[offArch:], a.audit)
	for i, v := range c.args {
		binary.BigEndian.PutUint32(data[offArgs+8*i:], uint32(v))
		binary.BigEndian.PutUint32(data[offArgs+8*i+4:], uint32(v>>32))
	}
	ret, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	switch r := uint32(ret); r & unix.SECCOMP_RET_ACTION_FULL {
	case unix.SECCOMP_RET_ALLOW:
		return 0
	case unix.SECCOMP_RET_ERRNO:
		return unix.Errno(r & unix.SECCOMP_RET_DATA)
	default:
		t.Fatalf("%v: BPF returned %#x", c, r)
		return 0
	}
}

// ociDecides applies the OCI form the way libseccomp does: an entry
// matches when every argument comparison holds; no entry, the default.
func ociDecides(t *testing.T, s *specs.LinuxSeccomp, c call) decision {
	t.Helper()
	if s.DefaultAction != specs.ActAllow {
		t.Fatalf("default action %s", s.DefaultAction)
	}
	var got []decision
	for _, sc := range s.Syscalls {
		if !slices.Contains(sc.Names, c.name) {
			continue
		}
		match := true
		for _, a := range sc.Args {
			if a.Op != specs.OpMaskedEqual {
				t.Fatalf("operator %s", a.Op)
			}
			match = match && c.args[a.Index]&a.Value == a.ValueTwo
		}
		if match {
			if sc.Action != specs.ActErrno || sc.ErrnoRet == nil {
				t.Fatalf("entry %v: action %s", sc.Names, sc.Action)
			}
			got = append(got, unix.Errno(*sc.ErrnoRet))
		}
	}
	slices.Sort(got)
	if got = slices.Compact(got); len(got) > 1 {
		t.Fatalf("%v: OCI entries disagree: %v", c, got)
	}
	if len(got) == 0 {
		return 0
	}
	return got[0]
}

func TestSeccompFormsAgree(t *testing.T) {
	prog, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	oci, err := OCISeccomp()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := hostArch()
	if len(oci.Architectures) != 1 || oci.Architectures[0] != a.oci {
		t.Fatalf("architectures %v", oci.Architectures)
	}
	agree := func(c call, want decision) {
		t.Helper()
		b, o := bpfDecides(t, vm, a, c), ociDecides(t, oci, c)
		if b != o {
			t.Errorf("%v: BPF %v, OCI %v", c, b, o)
		}
		if b != want {
			t.Errorf("%v: %v, want %v", c, b, want)
		}
	}
	for _, r := range Policy() {
		_, names, err := a.resolve(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			// Every condition holding, with junk above the 32 bits the
			// kernel reads: refused.
			c := call{name: name}
			for _, cond := range r.Args {
				c.args[cond.Index] = 0xdead_0000_0000_0000 | uint64(cond.Value)
			}
			agree(c, r.Errno)
			// Each condition failing in turn: the forms agree (another rule
			// may still refuse it).
			for _, cond := range r.Args {
				d := c
				d.args[cond.Index] ^= uint64(cond.Mask & -cond.Mask)
				b, o := bpfDecides(t, vm, a, d), ociDecides(t, oci, d)
				if b != o {
					t.Errorf("%v: BPF %v, OCI %v", d, b, o)
				}
			}
		}
	}
	// What a desktop needs stays allowed in both forms.
	for _, c := range []call{
		{name: "clone", args: [6]uint64{uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)}},
		{name: "clone", args: [6]uint64{uint64(unix.SIGCHLD)}},
		{name: "unshare", args: [6]uint64{unix.CLONE_FILES}},
		{name: "socket", args: [6]uint64{unix.AF_INET, unix.SOCK_STREAM}},
		{name: "socket", args: [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM}},
		{name: "socket", args: [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}},
		{name: "personality", args: [6]uint64{0}},
		{name: "personality", args: [6]uint64{0x0008}},
		{name: "personality", args: [6]uint64{0x20008}},
	} {
		agree(c, 0)
	}
	// The attacks of the isolation suite, by name.
	for _, c := range []struct {
		call
		want decision
	}{
		{call{name: "io_uring_setup"}, unix.EPERM},
		{call{name: "io_uring_enter"}, unix.EPERM},
		{call{name: "io_uring_register"}, unix.EPERM},
		{call{name: "socket", args: [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM}}, unix.EPERM},
		{call{name: "socket", args: [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT}}, unix.EINVAL},
		{call{name: "personality", args: [6]uint64{0x0400000}}, unix.EPERM},  // READ_IMPLIES_EXEC
		{call{name: "personality", args: [6]uint64{0x0040000}}, unix.EPERM},  // ADDR_NO_RANDOMIZE
		{call{name: "personality", args: [6]uint64{0xffffffff}}, unix.EPERM}, // see personalityAllowedBits
		{call{name: "clone3"}, unix.ENOSYS},
		{call{name: "clone", args: [6]uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}}, unix.EPERM},
		{call{name: "clone", args: [6]uint64{unix.CLONE_NEWNET}}, unix.EPERM},
		{call{name: "unshare", args: [6]uint64{unix.CLONE_NEWTIME}}, unix.EPERM},
		{call{name: "ptrace"}, unix.EPERM},
	} {
		agree(c.call, c.want)
	}
}

func TestSeccompPolicyRefusesAmbiguity(t *testing.T) {
	for name, rules := range map[string][]Rule{
		"always and conditional": {
			{Names: []string{"socket"}, Errno: unix.EPERM},
			{Names: []string{"socket"}, Errno: unix.EPERM, Args: []ArgCond{{Index: 0, Mask: 0xff, Value: 1}}},
		},
		"overlapping errnos": {
			{Names: []string{"socket"}, Errno: unix.EPERM, Args: []ArgCond{{Index: 0, Mask: 0xff, Value: 1}}},
			{Names: []string{"socket"}, Errno: unix.EINVAL, Args: []ArgCond{{Index: 2, Mask: 0xff, Value: 1}}},
		},
	} {
		if err := checkPolicy(rules); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	a, _ := hostArch()
	for name, r := range map[string]Rule{
		"argument twice": {Names: []string{"personality"}, Errno: unix.EPERM, Args: []ArgCond{{Index: 0, Mask: 1, Value: 1}, {Index: 0, Mask: 2, Value: 2}}},
		"value off mask": {Names: []string{"personality"}, Errno: unix.EPERM, Args: []ArgCond{{Index: 0, Mask: 1, Value: 2}}},
		"unknown call":   {Names: []string{"no_such_call"}, Errno: unix.EPERM},
		"no errno":       {Names: []string{"ptrace"}},
	} {
		if _, _, err := a.resolve(r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := checkPolicy(Policy()); err != nil {
		t.Fatal(err)
	}
}
