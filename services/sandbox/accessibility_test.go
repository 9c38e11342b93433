package sandbox

import "testing"

// TestIsDesktop: the programs that start an image's desktop program, and
// which hold programs started after them until its accessibility bus runs,
// are told from every other.
func TestIsDesktop(t *testing.T) {
	const path = "/usr/local/bin/deskgrid-session"
	shell := `if [ -n "$DESKGRID_SESSION" ]; then exec $DESKGRID_SESSION; fi; exit 0`
	for _, c := range []struct {
		argv []string
		want bool
	}{
		{[]string{"/bin/sh", "-c", shell, "deskgrid-session"}, true},
		{[]string{"/bin/sh", "-c", shell + `exec "$@"`, "deskgrid-session", "openbox"}, true},
		{[]string{path}, true},
		{[]string{"sh", "-c", "setsid -f mousepad"}, false},
		{[]string{"soffice", "--writer"}, false},
		{[]string{"sh", path}, false},
		{[]string{"/bin/sh", "-c"}, false},
		{nil, false},
	} {
		if got := isDesktop(c.argv, path); got != c.want {
			t.Errorf("isDesktop(%q) = %v, want %v", c.argv, got, c.want)
		}
	}
}
