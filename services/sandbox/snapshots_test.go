package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

func TestSnapshotSaveListRestoreDelete(t *testing.T) {
	for _, driver := range []string{DriverKernel, DriverFUSE} {
		t.Run(driver, func(t *testing.T) {
			h, ws, _ := workspaceHarness(t, driver, map[string]string{"edit.txt": "a\n", "gone.txt": "b\n", "old/x.txt": "x\n"})
			ctx := context.Background()
			script := `set -e; echo changed > edit.txt; rm gone.txt; rm -r old; mkdir old; echo y > old/y.txt; ln -s edit.txt link; echo new > new.txt`
			if res := h.mustExec(t, "ws", "sh", "-c", script); res.exit.GetExitCode() != 0 {
				t.Fatalf("script: %+v", res)
			}
			changesOf := func(id string) []string {
				t.Helper()
				resp, err := h.client.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: id})
				if err != nil {
					t.Fatal(err)
				}
				return kinds(resp.GetChanges())
			}
			want := changesOf("ws")
			snap, err := h.client.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SessionId: "ws"})
			if err != nil {
				t.Fatal(err)
			}
			sn := snap.GetSnapshot()
			data, err := os.ReadFile(filepath.Join(h.cfg.Root, "snapshots", sn.GetSnapshotId()+".tar.zst"))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			if int64(len(data)) != sn.GetSizeBytes() || hex.EncodeToString(sum[:]) != sn.GetSha256() || sn.GetLowerDir() != ws {
				t.Fatalf("snapshot %v: file is %d bytes", sn, len(data))
			}

			// Into a new session's sandbox over the same workspace.
			if _, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "ws2", Workspace: ws, SnapshotId: sn.GetSnapshotId()}); err != nil {
				t.Fatal(err)
			}
			if got := changesOf("ws2"); !slices.Equal(got, want) {
				t.Fatalf("restored changes %q, want %q", got, want)
			}
			if res := h.mustExec(t, "ws2", "sh", "-c", "cat link old/y.txt; ls old"); res.stdout != "changed\ny\ny.txt\n" {
				t.Fatalf("restored view: %q", res.stdout)
			}

			// Into the same sandbox, after its changes were discarded.
			if _, err := h.client.DiscardChanges(ctx, &sandboxv1.DiscardChangesRequest{SessionId: "ws"}); err != nil {
				t.Fatal(err)
			}
			if got := changesOf("ws"); len(got) != 0 {
				t.Fatalf("after discard: %q", got)
			}
			if _, err := h.client.RestoreSnapshot(ctx, &sandboxv1.RestoreSnapshotRequest{SessionId: "ws", SnapshotId: sn.GetSnapshotId()}); err != nil {
				t.Fatal(err)
			}
			if got := changesOf("ws"); !slices.Equal(got, want) {
				t.Fatalf("restored in place %q, want %q", got, want)
			}

			// Over another lower layer it means nothing: refused.
			h.create(t, "base", "")
			_, err = h.client.RestoreSnapshot(ctx, &sandboxv1.RestoreSnapshotRequest{SessionId: "base", SnapshotId: sn.GetSnapshotId()})
			wantCode(t, err, codes.FailedPrecondition)
			// And while a program runs.
			if _, err := h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: "ws", Argv: []string{"sleep", "1000"}}); err != nil {
				t.Fatal(err)
			}
			_, err = h.client.RestoreSnapshot(ctx, &sandboxv1.RestoreSnapshotRequest{SessionId: "ws", SnapshotId: sn.GetSnapshotId()})
			wantCode(t, err, codes.FailedPrecondition)

			list, err := h.client.ListSnapshots(ctx, &sandboxv1.ListSnapshotsRequest{SessionId: "ws"})
			if err != nil || len(list.GetSnapshots()) != 1 {
				t.Fatalf("ListSnapshots = %v %v", list, err)
			}
			if _, err := h.client.DeleteSnapshot(ctx, &sandboxv1.DeleteSnapshotRequest{SessionId: "ws", SnapshotId: sn.GetSnapshotId()}); err != nil {
				t.Fatal(err)
			}
			if list, _ := h.client.ListSnapshots(ctx, &sandboxv1.ListSnapshotsRequest{SessionId: "-"}); len(list.GetSnapshots()) != 0 {
				t.Fatalf("after delete: %v", list)
			}
			_, err = h.client.RestoreSnapshot(ctx, &sandboxv1.RestoreSnapshotRequest{SessionId: "ws", SnapshotId: sn.GetSnapshotId()})
			wantCode(t, err, codes.NotFound)
			_, err = h.client.DeleteSnapshot(ctx, &sandboxv1.DeleteSnapshotRequest{SessionId: "ws", SnapshotId: "../../etc"})
			wantCode(t, err, codes.InvalidArgument)
		})
	}
}
