package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
)

// onePool hands out the warm sandboxes it holds, each once.
type onePool struct {
	s   *Service
	mu  sync.Mutex
	ids []string
}

func (p *onePool) Claim(ctx context.Context, sessionID, tenant string, req *sandboxv1.CreateSandboxRequest, d DisplaySpec) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d != (DisplaySpec{Width: 1280, Height: 800, Depth: 24}) || len(p.ids) == 0 || !p.s.WarmFits(ctx, p.ids[0], tenant, req) {
		return false
	}
	id := p.ids[0]
	p.ids = p.ids[1:]
	return p.s.Rekey(ctx, id, sessionID, tenant) == nil
}

func metaOf(t *testing.T, root, id string) meta {
	t.Helper()
	m, err := readMeta(filepath.Join(root, "sandboxes", id))
	if err != nil {
		t.Fatalf("meta of %s: %v", id, err)
	}
	return m
}

// TestWarmSandboxGivenToOneSession: a sandbox made ahead of its session
// (CreateWarm), with a program running, is given by CreateSandbox to the
// first session asking for a warm desktop that fits: the program and its
// files are there, the directory is the session's; the next create, one of
// another image and one without the header start their own.
func TestWarmSandboxGivenToOneSession(t *testing.T) {
	h, _ := newImageHarness(t)
	ctx := context.Background()
	if err := h.svc.CreateWarm(ctx, "warm-a", "test/busybox:user"); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.StartProgram(ctx, "warm-a", []string{"sh", "-c", "echo started > /tmp/started; exec sleep 600"}); err != nil {
		t.Fatal(err)
	}
	if list, err := h.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{}); err != nil || len(list.GetSandboxes()) != 0 {
		t.Errorf("a warm sandbox is listed: %v %v", list.GetSandboxes(), err)
	}
	h.svc.SetWarmDesktops(&onePool{s: h.svc, ids: []string{"warm-a"}})
	create := func(id, ref string, desktop bool) (bool, *sandboxv1.Sandbox) {
		t.Helper()
		req := &sandboxv1.CreateSandboxRequest{SessionId: id, Image: ref}
		if desktop {
			req.Desktop = &sandboxv1.DesktopSpec{Width: 1280, Height: 800, Depth: 24}
		}
		resp, err := h.client.CreateSandbox(ctx, req)
		if err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		return resp.GetDesktopStarted(), resp.GetSandbox()
	}
	if warm, _ := create("plain", "test/busybox:user", false); warm {
		t.Errorf("a create naming no desktop was given the warm sandbox")
	}
	if warm, _ := create("other", "test/busybox:root", true); warm {
		t.Errorf("a create of another image was given the warm sandbox")
	}
	warm, sb := create("s1", "test/busybox:user", true)
	if !warm || sb.GetSessionId() != "s1" || sb.GetImageDigest() == "" {
		t.Fatalf("the first fitting create: warm %v, sandbox %v", warm, sb)
	}
	if got := h.sh(t, "s1", "cat /tmp/started; id -u; ps | grep -c 'sleep 600'"); !strings.HasPrefix(got, "started\n1000\n") {
		t.Errorf("in the session given the warm sandbox: %q", got)
	}
	m := metaOf(t, h.svc.cfg.Root, "s1")
	if m.SessionID != "s1" || m.Container != "warm-a" {
		t.Errorf("meta of s1: session %q container %q", m.SessionID, m.Container)
	}
	if _, err := os.Stat(filepath.Join(h.svc.cfg.Root, "sandboxes", "warm-a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the warm sandbox's directory is still there: %v", err)
	}
	if warm, _ := create("s2", "test/busybox:user", true); warm {
		t.Errorf("a warm sandbox was given twice")
	}
	// The session's range stays claimed by its (moved) directory.
	slot := filepath.Join(h.svc.cfg.IDSlotDir, itoa(h.svc.boxes["s1"].img.Slot), "owner")
	if owner, _ := os.ReadFile(slot); string(owner) != filepath.Join(h.svc.cfg.Root, "sandboxes", "s1") {
		t.Errorf("the id slot's owner is %q", owner)
	}
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.runtime().State(ctx, "warm-a"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the container of the deleted session: %v", err)
	}
}

// TestWarmSandboxReconciledAfterCrash: after a crash, a session given a
// warm sandbox is adopted with its container (named for the warm sandbox),
// and every other warm sandbox, given or not, is removed.
func TestWarmSandboxReconciledAfterCrash(t *testing.T) {
	ctx := context.Background()
	store, err := image.New(ctx, image.Deps{Dir: filepath.Join(t.TempDir(), "images"), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	importImage(t, store, busyboxImage(t, ""), "test/busybox:root")
	cfg := testConfig(t)
	crashed, err := New(ctx, cfg, Deps{Logger: quietLogger(), Images: store})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"warm-b", "warm-c", "warm-d"} {
		if err := crashed.CreateWarm(ctx, id, "test/busybox:root"); err != nil {
			t.Fatal(err)
		}
	}
	for from, to := range map[string]string{"warm-b": "keep", "warm-c": "drop"} {
		if err := crashed.Rekey(ctx, from, to, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(crashed.boxes["keep"].merged(), "root", "kept"), []byte("yes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The process is gone; its containers, mounts and cgroups are not.

	h := newHarness(t, cfg, Deps{Images: store})
	removed, err := h.svc.Reconcile(ctx, func(id string) bool { return id == "keep" })
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"drop", "warm-d"} {
		if !slices.Contains(removed, id) {
			t.Errorf("removed %v, want %s among them", removed, id)
		}
	}
	if slices.Contains(removed, "keep") || slices.Contains(removed, "warm-b") {
		t.Errorf("removed %v: the kept session's container is among them", removed)
	}
	for _, c := range []string{"warm-c", "warm-d"} {
		if _, err := h.svc.runtime().State(ctx, c); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("container %s: %v", c, err)
		}
	}
	if got := h.sh(t, "keep", "cat /root/kept; id -u"); got != "yes\n0" {
		t.Errorf("in the adopted session: %q", got)
	}
	if st, err := h.svc.runtime().State(ctx, "warm-b"); err != nil || st.Status != "running" {
		t.Errorf("the adopted session's container: %v %v", st, err)
	}
	// A second reconcile keeps it too.
	if removed, err := h.svc.Reconcile(ctx, func(id string) bool { return id == "keep" }); err != nil || len(removed) != 0 {
		t.Errorf("second reconcile: removed %v, %v", removed, err)
	}
	if pins, _ := store.Pins(); pins["warm-b"] != "" || pins["warm-c"] != "" || pins["warm-d"] != "" || pins["keep"] == "" {
		data, _ := json.Marshal(pins)
		t.Errorf("image pins after reconcile: %s", data)
	}
}
