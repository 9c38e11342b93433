package jail

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func hostArch() (arch, error) {
	nrs := syscallNumbers()
	for name, nr := range map[string]uint32{
		"iopl": unix.SYS_IOPL, "ioperm": unix.SYS_IOPERM, "uselib": unix.SYS_USELIB, "ustat": unix.SYS_USTAT,
		"sysfs": unix.SYS_SYSFS, "_sysctl": unix.SYS__SYSCTL, "create_module": unix.SYS_CREATE_MODULE,
	} {
		nrs[name] = nr
	}
	return arch{audit: unix.AUDIT_ARCH_X86_64, oci: specs.ArchX86_64, x32: true, nrs: nrs}, nil
}
