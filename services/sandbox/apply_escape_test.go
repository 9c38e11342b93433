package sandbox

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// What ApplyChanges copies out of a session's changed tree is read beneath
// it: a directory the session replaced with a link to the node's files
// since the listing reads nothing of the node, and a FIFO put in a file's
// place is refused at once instead of hanging the call.
func TestReadChangedStaysInTheTree(t *testing.T) {
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "secret"), []byte("node's"), 0o600); err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	if err := os.Symlink(host, filepath.Join(tree, "a")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(tree, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "ok"), []byte("session's"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(tree)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	read := func(rel string) (string, error) {
		var buf bytes.Buffer
		err := copyChanged(root, rel, 1<<20, &buf)
		return buf.String(), err
	}
	if data, err := read("a/secret"); err == nil {
		t.Errorf("read %q through a link out of the tree", data)
	}
	if _, err := read("fifo"); err == nil {
		t.Error("a FIFO read as a file")
	}
	if data, err := read("ok"); err != nil || data != "session's" {
		t.Errorf("the session's file: %q %v", data, err)
	}
	// A terabyte of holes, free to the session's quota, is not copied.
	if err := os.Truncate(filepath.Join(tree, "ok"), 1<<40); err != nil {
		t.Fatal(err)
	}
	if _, err := read("ok"); err == nil || !strings.Contains(err.Error(), "sparse") {
		t.Errorf("a sparse terabyte: %v, want refused naming sparse files", err)
	}
}
