package sandbox

import (
	"os"
	"path/filepath"
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
	if data, err := readChanged(root, "a/secret"); err == nil {
		t.Errorf("read %q through a link out of the tree", data)
	}
	if _, err := readChanged(root, "fifo"); err == nil {
		t.Error("a FIFO read as a file")
	}
	if data, err := readChanged(root, "ok"); err != nil || string(data) != "session's" {
		t.Errorf("the session's file: %q %v", data, err)
	}
}
