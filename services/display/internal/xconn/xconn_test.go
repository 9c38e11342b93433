package xconn

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"

	"github.com/deskgrid/deskgrid/services/display/internal/xauthority"
	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
)

func TestDialUsesTheDisplaysCookie(t *testing.T) {
	dir := t.TempDir()
	cookie, err := xauthority.NewCookie()
	if err != nil {
		t.Fatal(err)
	}
	auth := filepath.Join(dir, "Xauthority")
	if err := xauthority.Write(auth, cookie); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := xserver.Start(ctx, xserver.Options{Binary: "Xvfb", Width: 64, Height: 64, Depth: 24,
		AuthFile: auth, FirstDisplay: 4300, Displays: 20, StopTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })

	c, err := Dial(ctx, srv.Display, cookie)
	if err != nil {
		t.Fatalf("dial with the right cookie: %v", err)
	}
	// The connection works past the handshake: a round trip and the
	// extensions the service needs.
	if _, err := xproto.GetInputFocus(c).Reply(); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{"XTEST", "DAMAGE", "MIT-SHM"} {
		if _, ok := c.Extensions[ext]; !ok {
			t.Errorf("extension %s not set up", ext)
		}
	}
	c.Close()

	wrong := bytes.Repeat([]byte{1}, xauthority.CookieLen)
	if c, err := Dial(ctx, srv.Display, wrong); err == nil {
		c.Close()
		t.Fatal("a wrong cookie was accepted")
	} else if !strings.Contains(err.Error(), "authentication refused") {
		t.Errorf("wrong cookie: %v, want the server's refusal", err)
	}
	if _, err := Dial(ctx, srv.Display, []byte{1, 2, 3}); err == nil {
		t.Fatal("a short cookie was accepted")
	}
}
