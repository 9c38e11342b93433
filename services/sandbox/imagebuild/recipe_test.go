package imagebuild

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadRepoRecipes(t *testing.T) {
	desk, err := Load("../../../deploy/images/desktop")
	if err != nil {
		t.Fatal(err)
	}
	if desk.Config.Labels[SessionLabel] != "/usr/local/bin/deskgrid-session" {
		t.Errorf("session label = %q", desk.Config.Labels[SessionLabel])
	}
	for _, p := range []string{"chromium", "firefox-esr", "openbox", "tint2", "at-spi2-core", "sudo", "curl", "python3", "dbus-x11", "fonts-noto-color-emoji", "fonts-wqy-microhei"} {
		if !contains(desk.Packages, p) {
			t.Errorf("desktop recipe lacks %s", p)
		}
	}
	if _, err := os.Stat(filepath.Join(desk.FileDirs[0], "usr/local/bin/deskgrid-session")); err != nil {
		t.Errorf("session program missing from files/: %v", err)
	}

	office, err := Load("../../../deploy/images/desktop-office")
	if err != nil {
		t.Fatal(err)
	}
	if !contains(office.Packages, "chromium") || !contains(office.Packages, "libreoffice-writer") {
		t.Errorf("office recipe packages = %v, want the desktop's and LibreOffice", office.Packages)
	}
	if len(office.Scripts) != 2 || len(office.FileDirs) != 2 || office.Config.User != "1000:1000" {
		t.Errorf("office recipe does not carry the desktop's files, setup and config, then its own: %+v", office)
	}
	// What the office recipe adds on top of the desktop's image.
	if office.Base == nil || office.Base.Dir != desk.Dir || len(office.Base.Packages) != len(desk.Packages) {
		t.Fatalf("office recipe's base = %+v, want the desktop recipe as loaded", office.Base)
	}
	if contains(office.Own.Packages, "chromium") || !contains(office.Own.Packages, "libreoffice-calc") ||
		office.Own.Script != office.Scripts[1] || office.Own.FileDir != office.FileDirs[1] {
		t.Errorf("office recipe's own part = %+v", office.Own)
	}
	if _, err := os.Stat(filepath.Join(office.Own.FileDir, "home/user/.config/libreoffice/4/user/registrymodifications.xcu")); err != nil {
		t.Errorf("LibreOffice's first-start settings missing from the office recipe: %v", err)
	}
	if desk.Base != nil || len(desk.Own.Packages) != len(desk.Packages) {
		t.Errorf("desktop recipe: base %v, own %d packages of %d", desk.Base, len(desk.Own.Packages), len(desk.Packages))
	}
	if office.Config.Labels["org.opencontainers.image.description"] == desk.Config.Labels["org.opencontainers.image.description"] && office.Description == desk.Description {
		t.Errorf("office recipe kept the desktop's description")
	}
	h1, err := desk.Hash()
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := office.Hash()
	if h1 == h2 || len(h1) != 16 {
		t.Errorf("hashes %q %q: want two different 16-digit hashes", h1, h2)
	}
}

func TestHashFollowsEveryFile(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "recipe.yaml", "name: x\nsuite: bookworm\n")
	write(t, dir, "packages", "# tools\ncurl\n")
	write(t, dir, "files/etc/motd", "hello\n")
	r, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	h1, _ := r.Hash()
	again, _ := Load(dir)
	if h, _ := again.Hash(); h != h1 {
		t.Fatalf("same recipe, hashes %s and %s", h1, h)
	}
	write(t, dir, "files/etc/motd", "hello!\n")
	if h, _ := r.Hash(); h == h1 {
		t.Fatal("hash did not change when a file of files/ changed")
	}
}

func TestLoadRefusesBadRecipes(t *testing.T) {
	for name, c := range map[string]struct{ recipe, packages, want string }{
		"no name":         {"suite: bookworm\n", "curl\n", "no name"},
		"no suite":        {"name: x\n", "curl\n", "no suite"},
		"no packages":     {"name: x\nsuite: bookworm\n", "# none\n", "no packages"},
		"option smuggled": {"name: x\nsuite: bookworm\n", "curl,--foo\n", "not a Debian package name"},
		"unknown field":   {"name: x\nsuite: bookworm\nbogus: 1\n", "curl\n", "bogus"},
		"extends nothing": {"name: x\nsuite: bookworm\nextends: ../nowhere\n", "curl\n", "nowhere"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "recipe.yaml", c.recipe)
			write(t, dir, "packages", c.packages)
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load = %v, want an error about %q", err, c.want)
			}
		})
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Fatal("a directory without recipe.yaml loaded")
	}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
