package main

import (
	"bytes"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The sealing keys of secrets at rest: one key from -secret-key or the data
// dir (id "default"), or a rotation list whose first key seals and whose
// every key opens; a bad list is refused by name, without the key.
func TestSecretBoxKeys(t *testing.T) {
	b64 := func(c byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{c}, 32)) }
	box := func(spec, dir string) (*setup, error) {
		s := &setup{cfg: &serverConfig{SecretKey: spec, DataDir: dir}, logger: slog.New(slog.DiscardHandler)}
		_, err := s.secretBox()
		return s, err
	}

	dir := t.TempDir()
	s := &setup{cfg: &serverConfig{DataDir: dir}, logger: slog.New(slog.DiscardHandler)}
	first, err := s.secretBox()
	if err != nil || first.CurrentKeyID() != "default" {
		t.Fatalf("data dir key: %v, %v", first, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "secret.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret.key: %v, %v", fi, err)
	}
	sealed := first.Seal([]byte("sk-run-key"), []byte("run-1"))
	again, err := s.secretBox()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := again.Open(sealed, []byte("run-1")); err != nil || string(got) != "sk-run-key" {
		t.Fatalf("the data dir key after a restart: %q, %v", got, err)
	}

	// Rotation: the new key seals, the old one (given by its id) still opens.
	old := &setup{cfg: &serverConfig{SecretKey: b64(1)}, logger: slog.New(slog.DiscardHandler)}
	oldBox, err := old.secretBox()
	if err != nil {
		t.Fatal(err)
	}
	sealed = oldBox.Seal([]byte("sk-run-key"), []byte("run-2"))
	rotated := &setup{cfg: &serverConfig{SecretKey: "2026-11:" + b64(2) + ",default:" + b64(1)}, logger: slog.New(slog.DiscardHandler)}
	newBox, err := rotated.secretBox()
	if err != nil || newBox.CurrentKeyID() != "2026-11" {
		t.Fatalf("rotation list: %v, %v", newBox, err)
	}
	if got, err := newBox.Open(sealed, []byte("run-2")); err != nil || string(got) != "sk-run-key" {
		t.Fatalf("old key after rotation: %q, %v", got, err)
	}
	if !newBox.NeedsRotation(sealed) || newBox.NeedsRotation(newBox.Seal([]byte("x"), nil)) {
		t.Fatal("NeedsRotation does not tell old from new")
	}

	for _, bad := range []string{"short", "a:" + base64.StdEncoding.EncodeToString([]byte("short")), "a:" + b64(1) + ",a:" + b64(2)} {
		if _, err := box(bad, t.TempDir()); err == nil || !strings.Contains(err.Error(), "secret") {
			t.Fatalf("%q: %v", bad, err)
		} else if strings.Contains(err.Error(), b64(1)) {
			t.Fatalf("the error shows the key: %v", err)
		}
	}
}
