package blob_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/history/internal/blob"
)

func TestDirPutGetDelete(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d, err := blob.OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("\x89PNG fake image")
	h, err := d.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if h != blob.Hash(data) || !blob.ValidHash(h) {
		t.Fatalf("hash %q", h)
	}
	// Storing it again keeps one file.
	if h2, err := d.Put(ctx, data); err != nil || h2 != h {
		t.Fatalf("second put %q, %v", h2, err)
	}
	files := 0
	filepath.WalkDir(root, func(p string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			files++
		}
		return nil
	})
	if files != 1 {
		t.Fatalf("%d files; want 1", files)
	}
	got, err := d.Get(ctx, h)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get %q, %v", got, err)
	}
	if err := d.Delete(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get(ctx, h); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := d.Delete(ctx, h); err != nil {
		t.Fatalf("second delete: %v", err)
	}
}

func TestDirRefusesBadHashes(t *testing.T) {
	d, err := blob.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"", "../../etc/passwd", "ABCDEF" + string(make([]byte, 58)), blob.Hash(nil)[:63], blob.Hash(nil) + "0",
		"AB" + blob.Hash(nil)[2:], "../" + blob.Hash(nil)[3:]} {
		if _, err := d.Get(context.Background(), h); !errors.Is(err, blob.ErrInvalidHash) {
			t.Errorf("Get(%q): %v", h, err)
		}
		if err := d.Delete(context.Background(), h); !errors.Is(err, blob.ErrInvalidHash) {
			t.Errorf("Delete(%q): %v", h, err)
		}
	}
}

func TestDirWalk(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d, err := blob.OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := d.Put(ctx, []byte("old"))
	recent, _ := d.Put(ctx, []byte("recent"))
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(root, "sha256", old[:2], old), past, past); err != nil {
		t.Fatal(err)
	}
	// A temporary file left by a crash.
	leftover := filepath.Join(root, "tmp", "crashed")
	if err := os.WriteFile(leftover, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(leftover, past, past)

	var seen []string
	if err := d.Walk(ctx, time.Now().Add(-time.Minute), func(h string) error { seen = append(seen, h); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []string{old}) {
		t.Fatalf("walk saw %v; want only %s (not %s)", seen, old, recent)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover temporary file still there: %v", err)
	}
	// Putting the old blob again makes it recent.
	if _, err := d.Put(ctx, []byte("old")); err != nil {
		t.Fatal(err)
	}
	seen = nil
	d.Walk(ctx, time.Now().Add(-time.Minute), func(h string) error { seen = append(seen, h); return nil })
	if len(seen) != 0 {
		t.Fatalf("walk saw %v after the old blob was put again", seen)
	}
}
