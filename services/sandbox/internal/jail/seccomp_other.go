//go:build !amd64 && !arm64

package jail

import (
	"fmt"
	"runtime"
)

func hostArch() (arch, error) {
	return arch{}, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
}
