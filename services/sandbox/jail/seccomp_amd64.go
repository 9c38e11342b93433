package jail

import (
	"golang.org/x/sys/unix"
)

func hostArch() (arch, error) {
	return arch{audit: unix.AUDIT_ARCH_X86_64, x32: true, nrs: syscallNumbers()}, nil
}
