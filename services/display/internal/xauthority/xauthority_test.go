package xauthority

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReadRoundTrip(t *testing.T) {
	cookie, err := NewCookie()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "Xauthority")
	if err := Write(path, cookie); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, cookie) {
		t.Errorf("cookie = %x, want %x", got, cookie)
	}
}

// The file must be what libXau reads: xauth lists it as a wildcard entry.
func TestXauthListsEntry(t *testing.T) {
	xauth, err := exec.LookPath("xauth")
	if err != nil {
		t.Fatalf("xauth not installed (Debian package xauth): %v", err)
	}
	cookie := bytes.Repeat([]byte{0xab}, CookieLen)
	path := filepath.Join(t.TempDir(), "Xauthority")
	if err := Write(path, cookie); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(xauth, "-f", path, "nlist").CombinedOutput()
	if err != nil {
		t.Fatalf("xauth: %v: %s", err, out)
	}
	want := "ffff 0000  0000  0012 4d49542d4d414749432d434f4f4b49452d31 0010 " + strings.Repeat("ab", CookieLen)
	if strings.TrimSpace(string(out)) != want {
		t.Errorf("xauth nlist = %q, want %q", out, want)
	}
}

func TestWriteRejectsBadCookie(t *testing.T) {
	if err := Write(filepath.Join(t.TempDir(), "x"), []byte{1, 2}); err == nil {
		t.Fatal("want error for short cookie")
	}
}
