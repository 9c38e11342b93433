package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mixedScripts is n characters of Latin with accents, Greek, Cyrillic,
// Hebrew, Arabic, Devanagari, CJK, Hangul, emoji and punctuation, in lines.
func mixedScripts(n int) string {
	pieces := []string{"Grüße, naïve café ", "Ελληνικά ", "Привет, мир ", "שלום ", "مرحبا ", "नमस्ते ", "世界你好 ", "日本語のテキスト ", "한국어 ", "😀✓ — «»… ", "0123456789 ", "\n"}
	var b strings.Builder
	runes := 0
	for i := 0; runes < n; i++ {
		for _, r := range pieces[i%len(pieces)] {
			if runes == n {
				break
			}
			b.WriteRune(r)
			runes++
		}
	}
	return b.String()
}

// TestPasteIntoMousepad pastes 5000 characters of mixed scripts into
// Mousepad (GTK 3) in a desktop-image session with a paste `type` action:
// the file Mousepad saves holds exactly the text, and the clipboard holds
// again what was copied before. It then types part of the text key by key,
// for the time each takes.
func TestPasteIntoMousepad(t *testing.T) {
	p := startUpOnDesktop(t, t.TempDir(), t.TempDir())
	a := p.createWith(`{"display":{"width":1280,"height":800}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := p.sdkSession(ctx, t, a.ID)
	const file = "/tmp/pasted.txt"
	if out, code := p.execIn(a.ID, "sh", "-c", ": > "+file); code != 0 {
		t.Fatalf("create %s: %d %s", file, code, out)
	}
	l, err := s.Launch(ctx, "mousepad", file)
	if err != nil || l.Window == nil {
		t.Fatalf("launch mousepad: %v %v", err, l)
	}
	g := l.Window.GetGeometry()
	// The text view fills the window below its menu and toolbar.
	if err := s.Click(ctx, int(g.GetX()+g.GetWidth()/2), int(g.GetY()+g.GetHeight()/2)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetClipboard(ctx, "copied before ✓"); err != nil {
		t.Fatal(err)
	}
	// saved saves the file (again and again: a paste lands in Mousepad
	// in its own time) until it holds want, or 30 s passed.
	saved := func(want string) string {
		t.Helper()
		var got string
		deadline := time.Now().Add(30 * time.Second)
		for {
			if err := s.Key(ctx, "ctrl+s"); err != nil {
				t.Fatal(err)
			}
			got, _ = p.execIn(a.ID, "cat", file)
			if got == want || got == want+"\n" || time.Now().After(deadline) {
				return got
			}
			time.Sleep(500 * time.Millisecond) // polled: Mousepad pastes and saves in its own time
		}
	}

	// Mousepad takes keys once it is ready: a key typed and saved.
	// (The first key a session is sent may be dropped as the toolkit
	// reloads its keymap; docs/display.md.)
	for ready := false; !ready; {
		if err := s.Type(ctx, "AB"); err != nil {
			t.Fatal(err)
		}
		ready = strings.Contains(saved("AB"), "AB")
	}
	clear := func() {
		t.Helper()
		for _, k := range []string{"ctrl+a", "Delete"} {
			if err := s.Key(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	clear()
	text := mixedScripts(5000)
	start := time.Now()
	if err := s.Paste(ctx, text); err != nil {
		t.Fatalf("paste: %v", err)
	}
	pasteTook := time.Since(start)
	t.Logf("paste took %v", pasteTook)
	if got := saved(text); got != text && got != text+"\n" {
		if png, err := s.Screenshot(ctx); err == nil {
			_ = os.WriteFile(filepath.Join(os.TempDir(), "paste-mousepad.png"), png, 0o600)
		}
		t.Fatalf("Mousepad saved %d bytes after the paste, want the %d pasted (common prefix %d bytes)", len(got), len(text), commonPrefix(got, text))
	}
	if got, err := s.Clipboard(ctx); err != nil || got != "copied before ✓" {
		t.Fatalf("clipboard after the paste: %q, %v", got, err)
	}

	// The same text typed key by key, in part: how long typing takes.
	typed := mixedScripts(500)
	clear()
	start = time.Now()
	if err := s.Type(ctx, typed); err != nil {
		t.Fatalf("type: %v", err)
	}
	typeTook := time.Since(start)
	got := saved(typed)
	t.Logf("paste of %d characters (%d bytes): %v; typing %d characters (%d bytes): %v (%.2f ms a character), Mousepad holding %d bytes of which the first %d as typed",
		5000, len(text), pasteTook, 500, len(typed), typeTook, float64(typeTook.Microseconds())/500/1000, len(got), commonPrefix(got, typed))
}

func commonPrefix(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}
