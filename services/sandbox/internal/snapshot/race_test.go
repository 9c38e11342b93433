package snapshot

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestWriteReadsOnlyBeneathItsDir archives a layer whose session keeps
// swapping a directory for a link to the node's files while the archive is
// written (a session a resume thawed mid-snapshot, or one on a node without
// cgroups to freeze it). Whatever the archive holds must come from beneath
// the layer: a node file in it reaches the session at its next restore.
func TestWriteReadsOnlyBeneathItsDir(t *testing.T) {
	base := t.TempDir()
	upper, outside := filepath.Join(base, "upper"), filepath.Join(base, "node")
	const n = 400
	for _, d := range []string{filepath.Join(upper, "d"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		name := fmt.Sprintf("f%03d", i)
		if err := os.WriteFile(filepath.Join(upper, "d", name), []byte("session's!!"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(outside, name), []byte("NODE-SECRET"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d, real := filepath.Join(upper, "d"), filepath.Join(upper, "d.real")
		for !stop.Load() {
			_ = os.Rename(d, real)
			_ = os.Symlink(outside, d)
			_ = os.Remove(d)
			_ = os.Rename(real, d)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	for range 200 {
		var buf bytes.Buffer
		_ = Write(&buf, upper, 0) // may fail as the tree changes under it; what it wrote must be the layer's
		zr, err := zstd.NewReader(&buf)
		if err != nil {
			t.Fatal(err)
		}
		all, _ := io.ReadAll(zr)
		zr.Close()
		if strings.Contains(string(all), "NODE-SECRET") {
			t.Fatal("the archive holds a file from outside the layer")
		}
	}
}
