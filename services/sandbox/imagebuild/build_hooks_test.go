package imagebuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An image keeps nothing of the machine that built it: mmdebstrap copies
// the build machine's /etc/hostname and /etc/resolv.conf in, and the
// builder writes the session's host name, an /etc/hosts that resolves it
// and localhost, and the user-mode network's DNS server over them, never
// through a symlink out of the root filesystem. The recipe's files and
// setup come after the host name and hosts (they may replace them), the
// DNS server after the setup (which may still need the build machine's).
func TestBuildWritesHostFiles(t *testing.T) {
	r, err := Load("../../../deploy/images/desktop")
	if err != nil {
		t.Fatal(err)
	}
	args := (&Builder{d: Deps{Mmdebstrap: "mmdebstrap"}}).mmdebstrapArgs(r, "out.tar")
	var hooks []string
	for _, a := range args {
		if h, ok := strings.CutPrefix(a, "--customize-hook="); ok {
			hooks = append(hooks, h)
		}
	}
	at := func(h string) int {
		i := slices.Index(hooks, h)
		if i < 0 {
			t.Fatalf("no customize hook %q in %q", h, args)
		}
		return i
	}
	first, last := len(hooks), -1
	for i, h := range hooks {
		if strings.Contains(h, "/deploy/images/desktop/") {
			first, last = min(first, i), max(last, i)
		}
	}
	if last < 0 || at(imageHostname) > first || at(imageHosts) > first || at(imageResolv) < last {
		t.Fatalf("hooks in this order: %q; want host name and hosts before the recipe's files and setup, DNS after", hooks)
	}

	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "host-resolv.conf")
	if err := os.WriteFile(outside, []byte("nameserver 192.0.2.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("buildhost\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{imageHostname, imageHosts, imageResolv} {
		if out, err := exec.Command("sh", "-c", h, "hook", root).CombinedOutput(); err != nil {
			t.Fatalf("hook %q: %v: %s", h, err, out)
		}
	}
	for name, want := range map[string]string{
		"etc/hostname":    "sandbox\n",
		"etc/hosts":       "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/resolv.conf": "nameserver 10.0.2.3\n",
	} {
		fi, err := os.Lstat(filepath.Join(root, name))
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s: %v, %v; want a regular file", name, fi, err)
		}
		if got, _ := os.ReadFile(filepath.Join(root, name)); string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got, _ := os.ReadFile(outside); string(got) != "nameserver 192.0.2.1\n" {
		t.Errorf("the build machine's file was written through the symlink: %q", got)
	}
}
