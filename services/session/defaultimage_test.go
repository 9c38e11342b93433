package session

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDefaultImageAndItsDesktop: a session that names no image and no
// workspace gets the default image; its desktop is the image's own
// program (DESKGRID_SESSION), else the configured window manager.
func TestDefaultImageAndItsDesktop(t *testing.T) {
	s := &Service{cfg: Config{DefaultImage: "deskgrid/desktop:latest", Desktop: []string{"openbox"}}}
	for _, c := range []struct{ asked, workspace, want string }{
		{"", "", "deskgrid/desktop:latest"},
		{"team/x:v1", "", "team/x:v1"},
		{"", "/srv/ws", ""},
	} {
		if got := s.imageFor(c.asked, c.workspace); got != c.want {
			t.Errorf("imageFor(%q, %q) = %q, want %q", c.asked, c.workspace, got, c.want)
		}
	}
	if got := s.desktopArgv(false); !slices.Equal(got, []string{"openbox"}) {
		t.Errorf("without an image: %q", got)
	}
	// The image's program when it names one, the window manager when not:
	// run the argv as the sandbox would.
	argv := s.desktopArgv(true)
	for _, c := range []struct{ env, want string }{
		{"DESKGRID_SESSION=echo image-desktop", "image-desktop"},
		{"DESKGRID_SESSION=", "openbox"},
	} {
		cmd := exec.Command(argv[0], append(argv[1:len(argv)-1], "echo", "openbox")...)
		cmd.Env = []string{c.env, "PATH=/usr/bin:/bin"}
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("with %s: %q %v, want %q", c.env, out, err, c.want)
		}
	}
	s.cfg.Desktop = nil
	if out, err := exec.Command(s.desktopArgv(true)[0], s.desktopArgv(true)[1:]...).Output(); err != nil || len(out) != 0 {
		t.Errorf("an image without a desktop and no window manager: %q %v", out, err)
	}
}
