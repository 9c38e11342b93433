package jail

import (
	"slices"
	"strings"
	"testing"
)

func TestArgs(t *testing.T) {
	args, err := Args(Spec{HomeDir: "/srv/s/merged", Argv: []string{"echo", "hi"}, Env: []string{"A=1", "HOME=/elsewhere"}, Cwd: "/home/user/src"})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
		"--die-with-parent", "--new-session", "--cap-drop ALL", "--clearenv",
		"--ro-bind /usr /usr", "--bind /srv/s/merged /home/user", "--tmpfs /tmp", "--proc /proc", "--dev /dev",
		"--setenv A 1", "--setenv HOME /elsewhere", "--chdir /home/user/src -- echo hi",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q: %s", want, joined)
		}
	}
	for _, secret := range []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh", "/root", "/etc/passwd", "/var/lib", "/home/user "} {
		if strings.Contains(joined, secret+" ") && secret != "/home/user " {
			t.Errorf("args expose %s", secret)
		}
	}
	if slices.Contains(args, "/etc") && !strings.Contains(joined, "--dir /etc") {
		t.Errorf("host /etc bound whole: %s", joined)
	}
	if n := strings.Count(joined, "--setenv HOME"); n != 1 {
		t.Errorf("HOME set %d times", n)
	}
}

func TestArgsRefuses(t *testing.T) {
	for name, spec := range map[string]Spec{
		"no argv":    {HomeDir: "/h"},
		"empty argv": {HomeDir: "/h", Argv: []string{""}},
		"no home":    {Argv: []string{"true"}},
		"bad env":    {HomeDir: "/h", Argv: []string{"true"}, Env: []string{"1X=y"}},
	} {
		if _, err := Args(spec); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestHostSocket(t *testing.T) {
	for _, tc := range []struct {
		display, socket, n string
		ok                 bool
	}{
		{":0", "/tmp/.X11-unix/X0", "0", true},
		{":12.0", "/tmp/.X11-unix/X12", "12", true},
		{"12", "", "", false},
		{":", "", "", false},
		{":1/../../etc", "", "", false},
		{"host:1", "", "", false},
	} {
		sock, n, err := HostSocket("/tmp/.X11-unix", tc.display)
		if (err == nil) != tc.ok || sock != tc.socket || n != tc.n {
			t.Errorf("HostSocket(%q) = %q %q %v", tc.display, sock, n, err)
		}
	}
}
