//go:build amd64 || arm64

package jail

import (
	"golang.org/x/sys/unix"
)

// syscallNumbers names the calls the policy names that every supported
// architecture has; x/sys gives each its own numbers under the same names.
func syscallNumbers() map[string]uint32 {
	return map[string]uint32{
		"ptrace":            unix.SYS_PTRACE,
		"process_vm_readv":  unix.SYS_PROCESS_VM_READV,
		"process_vm_writev": unix.SYS_PROCESS_VM_WRITEV,
		"kcmp":              unix.SYS_KCMP,
		"pidfd_getfd":       unix.SYS_PIDFD_GETFD,
		"mount":             unix.SYS_MOUNT,
		"umount2":           unix.SYS_UMOUNT2,
		"pivot_root":        unix.SYS_PIVOT_ROOT,
		"fsopen":            unix.SYS_FSOPEN,
		"fsconfig":          unix.SYS_FSCONFIG,
		"fsmount":           unix.SYS_FSMOUNT,
		"fspick":            unix.SYS_FSPICK,
		"move_mount":        unix.SYS_MOVE_MOUNT,
		"open_tree":         unix.SYS_OPEN_TREE,
		"mount_setattr":     unix.SYS_MOUNT_SETATTR,
		"kexec_load":        unix.SYS_KEXEC_LOAD,
		"kexec_file_load":   unix.SYS_KEXEC_FILE_LOAD,
		"init_module":       unix.SYS_INIT_MODULE,
		"finit_module":      unix.SYS_FINIT_MODULE,
		"delete_module":     unix.SYS_DELETE_MODULE,
		"reboot":            unix.SYS_REBOOT,
		"bpf":               unix.SYS_BPF,
		"perf_event_open":   unix.SYS_PERF_EVENT_OPEN,
		"userfaultfd":       unix.SYS_USERFAULTFD,
		"keyctl":            unix.SYS_KEYCTL,
		"add_key":           unix.SYS_ADD_KEY,
		"request_key":       unix.SYS_REQUEST_KEY,
		"swapon":            unix.SYS_SWAPON,
		"swapoff":           unix.SYS_SWAPOFF,
		"acct":              unix.SYS_ACCT,
		"quotactl":          unix.SYS_QUOTACTL,
		"settimeofday":      unix.SYS_SETTIMEOFDAY,
		"clock_settime":     unix.SYS_CLOCK_SETTIME,
		"clock_adjtime":     unix.SYS_CLOCK_ADJTIME,
		"adjtimex":          unix.SYS_ADJTIMEX,
		"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
		"name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT,
		"setns":             unix.SYS_SETNS,
		"clone3":            unix.SYS_CLONE3,
		"unshare":           unix.SYS_UNSHARE,
		"clone":             unix.SYS_CLONE,
		"process_madvise":   unix.SYS_PROCESS_MADVISE,
		"quotactl_fd":       unix.SYS_QUOTACTL_FD,
		"syslog":            unix.SYS_SYSLOG,
		"vhangup":           unix.SYS_VHANGUP,
		"lookup_dcookie":    unix.SYS_LOOKUP_DCOOKIE,
		"fanotify_init":     unix.SYS_FANOTIFY_INIT,
		"nfsservctl":        unix.SYS_NFSSERVCTL,
		"io_uring_setup":    unix.SYS_IO_URING_SETUP,
		"io_uring_enter":    unix.SYS_IO_URING_ENTER,
		"io_uring_register": unix.SYS_IO_URING_REGISTER,
		"socket":            unix.SYS_SOCKET,
		"personality":       unix.SYS_PERSONALITY,
	}
}
