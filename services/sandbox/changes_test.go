package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// workspaceHarness makes a workspace with a few files and a sandbox over it.
func workspaceHarness(t testing.TB, driver string, files map[string]string) (*harness, string, *sandboxv1.Sandbox) {
	t.Helper()
	cfg := testConfig(t)
	cfg.Driver = driver
	roots := t.TempDir()
	ws := filepath.Join(roots, "project")
	for name, content := range files {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg.WorkspaceRoots = []string{roots}
	h := newHarness(t, cfg, Deps{})
	return h, ws, h.create(t, "ws", ws)
}

func kinds(cs []*sandboxv1.Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s %s", strings.TrimPrefix(c.GetKind().String(), "CHANGE_KIND_"), c.GetPath()))
	}
	return out
}

func TestChangesListDiffApplyDiscard(t *testing.T) {
	for _, driver := range []string{DriverKernel, DriverFUSE, DriverCopy} {
		t.Run(driver, func(t *testing.T) {
			h, ws, _ := workspaceHarness(t, driver, map[string]string{
				"keep.txt": "same\n", "edit.txt": "one\ntwo\nthree\n", "gone.txt": "bye\n",
				"dir/a.txt": "a\n", "old/x.txt": "x\n", "conflict.txt": "v1\n", "touched.txt": "t\n",
			})
			ctx := context.Background()
			script := `set -e
printf 'one\n2\nthree\n' > edit.txt
rm gone.txt
echo new > new.txt
mkdir -p fresh/sub && echo f > fresh/sub/f.txt
printf '\000\001' > blob.bin
rm -r old && mkdir old && echo y > old/y.txt
echo mine > conflict.txt
chmod 600 touched.txt && chmod 644 touched.txt
cat keep.txt > /dev/null`
			if res := h.mustExec(t, "ws", "sh", "-c", script); res.exit.GetExitCode() != 0 {
				t.Fatalf("script: %+v", res)
			}
			list, err := h.client.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: "ws"})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"ADDED blob.bin", "MODIFIED conflict.txt", "MODIFIED edit.txt", "ADDED fresh", "ADDED fresh/sub", "ADDED fresh/sub/f.txt", "DELETED gone.txt", "ADDED new.txt", "DELETED old/x.txt", "ADDED old/y.txt"}
			if got := kinds(list.GetChanges()); !slices.Equal(got, want) {
				t.Fatalf("changes\n got %q\nwant %q", got, want)
			}
			d, err := h.client.DiffFile(ctx, &sandboxv1.DiffFileRequest{SessionId: "ws", Path: "edit.txt"})
			if err != nil || d.GetBinary() || !strings.Contains(d.GetDiff(), "-two\n+2\n") || !strings.Contains(d.GetDiff(), "--- a/edit.txt") {
				t.Fatalf("diff: %v %v", d, err)
			}
			if d, err := h.client.DiffFile(ctx, &sandboxv1.DiffFileRequest{SessionId: "ws", Path: "blob.bin"}); err != nil || !d.GetBinary() {
				t.Fatalf("binary diff: %v %v", d, err)
			}
			_, err = h.client.DiffFile(ctx, &sandboxv1.DiffFileRequest{SessionId: "ws", Path: "keep.txt"})
			wantCode(t, err, codes.NotFound)

			// Someone edits the workspace meanwhile: that file is a conflict.
			if err := os.WriteFile(filepath.Join(ws, "conflict.txt"), []byte("theirs\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			ap, err := h.client.ApplyChanges(ctx, &sandboxv1.ApplyChangesRequest{SessionId: "ws", Paths: []string{"edit.txt", "gone.txt", "fresh", "conflict.txt", "old"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(ap.GetConflicts()) != 1 || ap.GetConflicts()[0].GetPath() != "conflict.txt" {
				t.Fatalf("conflicts %v", ap.GetConflicts())
			}
			if !slices.Equal(ap.GetApplied(), []string{"edit.txt", "fresh", "fresh/sub", "fresh/sub/f.txt", "gone.txt", "old/x.txt", "old/y.txt"}) {
				t.Fatalf("applied %v", ap.GetApplied())
			}
			for p, want := range map[string]string{"edit.txt": "one\n2\nthree\n", "fresh/sub/f.txt": "f\n", "conflict.txt": "theirs\n", "old/y.txt": "y\n"} {
				if got, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(got) != want {
					t.Fatalf("workspace %s = %q %v, want %q", p, got, err, want)
				}
			}
			for _, p := range []string{"gone.txt", "old/x.txt", "new.txt"} {
				if _, err := os.Stat(filepath.Join(ws, p)); !os.IsNotExist(err) {
					t.Fatalf("workspace %s: %v", p, err)
				}
			}
			// Applying again is not a conflict with itself.
			if ap, err := h.client.ApplyChanges(ctx, &sandboxv1.ApplyChangesRequest{SessionId: "ws", Paths: []string{"edit.txt"}}); err != nil || len(ap.GetConflicts()) != 0 {
				t.Fatalf("re-apply: %v %v", ap, err)
			}

			// Discard: the lower layer shows through again.
			dis, err := h.client.DiscardChanges(ctx, &sandboxv1.DiscardChangesRequest{SessionId: "ws", Paths: []string{"new.txt", "conflict.txt", "blob.bin"}})
			if err != nil || len(dis.GetDiscarded()) != 3 {
				t.Fatalf("discard: %v %v", dis, err)
			}
			got, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "ws", Path: "conflict.txt"})
			if err != nil || string(got.GetContent()) != "theirs\n" {
				t.Fatalf("after discard conflict.txt = %q %v", got.GetContent(), err)
			}
			_, err = h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "ws", Path: "new.txt"})
			wantCode(t, err, codes.NotFound)

			// Refused while something runs in the sandbox.
			if _, err := h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: "ws", Argv: []string{"sleep", "1000"}}); err != nil {
				t.Fatal(err)
			}
			_, err = h.client.DiscardChanges(ctx, &sandboxv1.DiscardChangesRequest{SessionId: "ws"})
			wantCode(t, err, codes.FailedPrecondition)
		})
	}
}

// BenchmarkListChanges lists 100 changes over a 10,000-file workspace.
func BenchmarkListChanges(b *testing.B) {
	files := map[string]string{}
	for i := range 10000 {
		files[fmt.Sprintf("d%02d/f%05d.txt", i%100, i)] = fmt.Sprintf("file %d\n", i)
	}
	h, _, sb := workspaceHarness(b, DriverKernel, files)
	for i := range 100 {
		p := filepath.Join(sb.GetRootDir(), fmt.Sprintf("d%02d/f%05d.txt", i%100, i*100+i%100))
		if err := os.WriteFile(p, []byte("changed\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	for b.Loop() {
		resp, err := h.client.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: "ws"})
		if err != nil || len(resp.GetChanges()) != 100 {
			b.Fatalf("%d changes, %v", len(resp.GetChanges()), err)
		}
	}
}
