package sandbox

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

func TestDiskQuota(t *testing.T) {
	for _, backing := range []string{"ext4", "tmpfs"} {
		t.Run(backing, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.DiskBacking = backing
			h := newHarness(t, cfg, Deps{})
			ctx := context.Background()
			resp, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "full", DiskBytes: 16 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetSandbox().GetDisk() != backing || resp.GetSandbox().GetLimits().GetDiskBytes() != 16<<20 {
				t.Fatalf("sandbox %v", resp.GetSandbox())
			}
			_, err = h.upload(t, "full", "big", make([]byte, 32<<20), 1<<20)
			wantCode(t, err, codes.ResourceExhausted)
			if !strings.Contains(err.Error(), "disk is full") {
				t.Fatalf("error %q does not say the disk is full", err)
			}
			if n := h.svc.LimitEvents().DiskFull; n != 1 {
				t.Fatalf("node disk-full count = %d after one refused upload", n)
			}
			res := h.mustExec(t, "full", "sh", "-c", "head -c 33554432 /dev/zero > f")
			if res.exit.GetExitCode() == 0 || !strings.Contains(res.stderr, "No space left") {
				t.Fatalf("filling by exec: %+v", res)
			}
			// The session's own program filled it: counted once, however
			// often the counts are read while it stays full.
			for range 2 {
				if n := h.svc.LimitEvents().DiskFull; n != 2 {
					t.Fatalf("node disk-full count = %d after a program filled the disk, want 2", n)
				}
			}
			// Room again once the file is gone.
			if res := h.mustExec(t, "full", "sh", "-c", "rm f && echo ok > small && cat small"); res.stdout != "ok\n" {
				t.Fatalf("after freeing: %+v", res)
			}
			if n := h.svc.LimitEvents().DiskFull; n != 2 {
				t.Fatalf("node disk-full count = %d with room again, want 2", n)
			}
			// Filled a second time: counted again.
			if res := h.mustExec(t, "full", "sh", "-c", "head -c 33554432 /dev/zero > f"); !strings.Contains(res.stderr, "No space left") {
				t.Fatalf("filling again: %+v", res)
			}
			if n := h.svc.LimitEvents().DiskFull; n != 3 {
				t.Fatalf("node disk-full count = %d after the disk filled again, want 3", n)
			}
			_ = h.mustExec(t, "full", "rm", "f")
			if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "full"}); err != nil {
				t.Fatal(err)
			}
			out, _ := exec.Command("losetup", "-a").CombinedOutput()
			if strings.Contains(string(out), h.cfg.Root) {
				t.Fatalf("loop device left: %s", out)
			}
		})
	}
}

// A sandbox whose request names no disk limit gets the default one: it
// cannot write past DefaultDiskBytes onto the node's disk.
func TestDefaultDiskQuota(t *testing.T) {
	cfg := testConfig(t)
	// What a node runs with unless -session-disk-bytes says otherwise.
	cfg.Limits.DiskBytes = DefaultDiskBytes
	h := newHarness(t, cfg, Deps{})
	resp, err := h.client.CreateSandbox(context.Background(), &sandboxv1.CreateSandboxRequest{SessionId: "dflt"})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetSandbox().GetLimits().GetDiskBytes(); got != DefaultDiskBytes {
		t.Fatalf("sandbox disk limit %d, want %d", got, DefaultDiskBytes)
	}
	if res := h.mustExec(t, "dflt", "sh", "-c", "echo ok > small && cat small"); res.stdout != "ok\n" {
		t.Fatalf("small write under the quota: %+v", res)
	}
	// Reserving the blocks is refused without writing them all.
	res := h.mustExec(t, "dflt", "fallocate", "-l", fmt.Sprint(DefaultDiskBytes+(64<<20)), "big")
	if res.exit.GetExitCode() == 0 || !strings.Contains(res.stderr, "No space left") {
		t.Fatalf("fallocate past the default quota: %+v", res)
	}
}
