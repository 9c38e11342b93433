package changes

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestListStaysInTheUpperLayer lists the changes of a layer whose session
// keeps swapping a directory for a link to a node directory, and a copied-up
// file for a FIFO, while it is listed (sessions run while their changes are
// listed). The list names only the layer's own entries, and returns: it
// never lists the node's directory (its names and sizes) or blocks opening
// a FIFO.
func TestListStaysInTheUpperLayer(t *testing.T) {
	base := t.TempDir()
	upper, lower, node := filepath.Join(base, "upper"), filepath.Join(base, "lower"), filepath.Join(base, "node")
	for _, d := range []string{filepath.Join(upper, "d"), lower, node} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		if err := os.WriteFile(filepath.Join(upper, "d", fmt.Sprintf("f%02d", i)), []byte("s"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(node, fmt.Sprintf("node-secret-%02d", i)), []byte("n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A copied-up file equal to its lower one: compared by content.
	for _, dir := range []string{upper, lower} {
		if err := os.WriteFile(filepath.Join(dir, "same"), []byte("same"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		d, real := filepath.Join(upper, "d"), filepath.Join(upper, "d.real")
		for !stop.Load() {
			_ = os.Rename(d, real)
			_ = os.Symlink(node, d)
			_ = os.Remove(d)
			_ = os.Rename(real, d)
		}
	}()
	go func() {
		defer wg.Done()
		f, keep, fifo := filepath.Join(upper, "same"), filepath.Join(upper, "same.keep"), filepath.Join(upper, "same.fifo")
		_ = syscall.Mkfifo(fifo, 0o644)
		for !stop.Load() {
			_ = os.Rename(f, keep)
			_ = os.Rename(fifo, f)
			_ = os.Rename(f, fifo)
			_ = os.Rename(keep, f)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	done := make(chan error, 1)
	go func() {
		listed := 0
		for range 3000 {
			list, err := List(upper, lower, "", nil)
			if err != nil {
				continue // the tree changed under it
			}
			listed++
			for _, c := range list {
				if strings.Contains(c.Path, "node-secret") {
					done <- fmt.Errorf("the node's directory was listed: %s", c.Path)
					return
				}
			}
		}
		if listed == 0 {
			done <- fmt.Errorf("no list went through: nothing was tried")
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute): // a guard: the lists take well under a second
		t.Fatal("listing blocked (opening a FIFO)")
	}
}
