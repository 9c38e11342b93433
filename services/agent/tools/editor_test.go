package tools

import "testing"

func TestEditorPaths(t *testing.T) {
	e := &Executor{}
	for in, want := range map[string]string{
		"/home/user/a.txt":         "a.txt",
		"/home/user/dir/../b.txt":  "b.txt",
		"/home/user":               "",
		"/home/user/":              "",
		"notes/c.txt":              "notes/c.txt",
		"/etc/passwd":              "!",
		"/home/user/../etc/passwd": "!",
		"/home/username/x":         "!",
		"/":                        "!",
	} {
		got, ok := e.relPath(in)
		if !ok {
			got = "!"
		}
		if got != want {
			t.Errorf("relPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// On a session that runs an image the sandbox's files are the whole file
// system: absolute paths are taken as they are, relative ones from the
// home, and the sandbox refuses any that climb out.
func TestEditorPathsOnAnImage(t *testing.T) {
	e := &Executor{WholeRoot: true}
	for in, want := range map[string]string{
		"/home/user/a.txt":   "/home/user/a.txt",
		"/tmp/x/../b.txt":    "/tmp/b.txt",
		"/etc/app.conf":      "/etc/app.conf",
		"notes/c.txt":        "notes/c.txt",
		"/":                  "/",
		"/home/user/../../x": "/x",
	} {
		got, ok := e.relPath(in)
		if !ok || got != want {
			t.Errorf("relPath(%q) = %q %v, want %q", in, got, ok, want)
		}
	}
}
