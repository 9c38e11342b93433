package jail

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func hostArch() (arch, error) {
	return arch{audit: unix.AUDIT_ARCH_AARCH64, oci: specs.ArchAARCH64, x32: false, nrs: syscallNumbers()}, nil
}
