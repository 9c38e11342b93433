package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

func wsURL(h *harness, path string) string {
	return "ws" + strings.TrimPrefix(h.srv.URL, "http") + path
}

func dialVNC(t *testing.T, h *harness, path string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if hdr == nil {
		hdr = http.Header{"Origin": {h.srv.URL}}
	}
	c, resp, err := websocket.Dial(ctx, wsURL(h, path), &websocket.DialOptions{Subprotocols: []string{"binary"}, HTTPHeader: hdr})
	if c != nil {
		c.SetReadLimit(16 << 20)
		t.Cleanup(func() { c.CloseNow() })
	}
	return c, resp, err
}

func waitEnded(t *testing.T, d *vncDisplay, sessionID string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case id := <-d.ended:
			if id == sessionID {
				return
			}
		case <-timeout:
			t.Fatalf("the node's ConnectVNC for %s did not end", sessionID)
		}
	}
}

// rfbHandshake is the client side of RFB 3.8 up to ServerInit.
func rfbHandshake(t *testing.T, c net.Conn) (width, height int, name string) {
	t.Helper()
	buf := make([]byte, 12)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "RFB 003.008\n" {
		t.Fatalf("server version %q: %v", buf, err)
	}
	must(t, write(c, []byte("RFB 003.008\n")))
	sec := make([]byte, 2)
	if _, err := io.ReadFull(c, sec); err != nil || sec[0] != 1 || sec[1] != 1 {
		t.Fatalf("security types %v: %v", sec, err)
	}
	must(t, write(c, []byte{1}))
	res := make([]byte, 4)
	if _, err := io.ReadFull(c, res); err != nil || binary.BigEndian.Uint32(res) != 0 {
		t.Fatalf("security result %v: %v", res, err)
	}
	must(t, write(c, []byte{1}))
	init := make([]byte, 24)
	if _, err := io.ReadFull(c, init); err != nil {
		t.Fatal(err)
	}
	n := make([]byte, binary.BigEndian.Uint32(init[20:]))
	if _, err := io.ReadFull(c, n); err != nil {
		t.Fatal(err)
	}
	return int(binary.BigEndian.Uint16(init[0:])), int(binary.BigEndian.Uint16(init[2:])), string(n)
}

func write(c io.Writer, b []byte) error { _, err := c.Write(b); return err }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func nextMessage(t *testing.T, srv *rfbServer) rfbMessage {
	t.Helper()
	select {
	case m := <-srv.got:
		return m
	case <-time.After(20 * time.Second):
		t.Fatal("the RFB server received nothing")
		return rfbMessage{}
	}
}

func TestVNCCarriesRFBBothWays(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	c, _, err := dialVNC(t, h, "/v1/sessions/s-1/vnc", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subprotocol() != "binary" {
		t.Fatalf("subprotocol %q, want binary", c.Subprotocol())
	}
	if h.display.lastFirst().GetSessionId() != "s-1" || h.display.lastFirst().GetViewOnly() {
		t.Fatalf("first message %v", h.display.lastFirst())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc := websocket.NetConn(ctx, c, websocket.MessageBinary)
	w, hgt, name := rfbHandshake(t, nc)
	if w != 64 || hgt != 48 || name != "fake desktop" {
		t.Fatalf("ServerInit %dx%d %q", w, hgt, name)
	}
	srv := h.display.server("s-1")

	// The pixel format noVNC asks for: 32 bits, little-endian, red lowest.
	pf := pixelFormat{bpp: 32, depth: 24, trueColour: 1, rMax: 255, gMax: 255, bMax: 255, rShift: 0, gShift: 8, bShift: 16}
	must(t, write(nc, append([]byte{0, 0, 0, 0}, pf.bytes()...)))
	must(t, write(nc, []byte{2, 0, 0, 1, 0, 0, 0, 0}))
	must(t, write(nc, []byte{3, 0, 0, 0, 0, 0, 0, 64, 0, 48}))
	hdr := make([]byte, 16)
	if _, err := io.ReadFull(nc, hdr); err != nil {
		t.Fatal(err)
	}
	if hdr[0] != 0 || binary.BigEndian.Uint16(hdr[2:]) != 1 || binary.BigEndian.Uint16(hdr[8:]) != 64 || binary.BigEndian.Uint16(hdr[10:]) != 48 {
		t.Fatalf("FramebufferUpdate header % x", hdr)
	}
	pixels := make([]byte, 64*48*4)
	if _, err := io.ReadFull(nc, pixels); err != nil {
		t.Fatal(err)
	}
	if want := bytes.Repeat([]byte{0x12, 0xa0, 0x63, 0}, 64*48); !bytes.Equal(pixels, want) {
		t.Fatalf("pixels start % x, want % x", pixels[:8], want[:8])
	}
	for _, typ := range []byte{0, 2, 3} {
		if m := nextMessage(t, srv); m.Type != typ {
			t.Fatalf("server got message %d, want %d", m.Type, typ)
		}
	}

	// Input and a clipboard larger than one gRPC message arrive exactly.
	key := []byte{4, 1, 0, 0, 0, 0, 0, 0x61}
	must(t, write(nc, key))
	if m := nextMessage(t, srv); m.Type != 4 || !bytes.Equal(m.Body, key[1:]) {
		t.Fatalf("key event %v", m)
	}
	text := bytes.Repeat([]byte("clipboard "), 20000)
	cut := binary.BigEndian.AppendUint32([]byte{6, 0, 0, 0}, uint32(len(text)))
	must(t, write(nc, append(cut, text...)))
	if m := nextMessage(t, srv); m.Type != 6 || !bytes.Equal(m.Body[7:], text) {
		t.Fatalf("cut text: type %d, %d bytes", m.Type, len(m.Body))
	}
}

func TestVNCClosePropagates(t *testing.T) {
	t.Run("viewer closes: the node's stream ends", func(t *testing.T) {
		for _, how := range []string{"close frame", "dropped connection"} {
			t.Run(how, func(t *testing.T) {
				h := newHarness(t, DefaultConfig(), Deps{})
				c, _, err := dialVNC(t, h, "/v1/sessions/s-1/vnc", nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, err := c.Read(context.Background()); err != nil {
					t.Fatal(err)
				}
				if how == "close frame" {
					must(t, c.Close(websocket.StatusNormalClosure, "bye"))
				} else {
					must(t, c.CloseNow())
				}
				waitEnded(t, h.display, "s-1")
			})
		}
	})

	tests := []struct {
		name       string
		end        func(h *harness, c *websocket.Conn)
		wantStatus websocket.StatusCode
		wantReason string
	}{
		{"display deleted", func(h *harness, _ *websocket.Conn) { h.display.deleteDisplay("s-1") }, websocket.StatusGoingAway, "the display of session s-1 was deleted"},
		{"VNC server hangs up", func(_ *harness, c *websocket.Conn) {
			// A message type no RFB server knows makes it drop the connection.
			_ = c.Write(context.Background(), websocket.MessageBinary, []byte{99})
		}, websocket.StatusNormalClosure, "the desktop ended the connection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig(), Deps{})
			c, _, err := dialVNC(t, h, "/v1/sessions/s-1/vnc", nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rfbHandshake(t, websocket.NetConn(ctx, c, websocket.MessageBinary))
			tt.end(h, c)
			for {
				_, _, err = c.Read(context.Background())
				if err != nil {
					break
				}
			}
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != tt.wantStatus || ce.Reason != tt.wantReason {
				t.Fatalf("read error %v, want close %d %q", err, tt.wantStatus, tt.wantReason)
			}
			waitEnded(t, h.display, "s-1")
		})
	}
}

func TestVNCUpgradeRefused(t *testing.T) {
	deny := func(err error) func(*http.Request, string) (bool, error) {
		return func(*http.Request, string) (bool, error) { return false, err }
	}
	tests := []struct {
		name      string
		path      string
		origin    string
		authorize func(*http.Request, string) (bool, error)
		want      int
		message   string
		reached   bool // whether the node saw the connection
	}{
		{"unknown session", "/v1/sessions/s-404/vnc", "", nil, 404, "no display for session s-404", true},
		{"origin of another site", "/v1/sessions/s-1/vnc", "http://evil.example", nil, 403, "origin http://evil.example may not open a VNC connection", false},
		{"malformed origin", "/v1/sessions/s-1/vnc", "::", nil, 403, "may not open a VNC connection", false},
		{"bad view_only", "/v1/sessions/s-1/vnc?view_only=maybe", "", nil, 400, `view_only must be true or false, got "maybe"`, false},
		{"not authorized", "/v1/sessions/s-1/vnc", "", deny(errors.New("this token is for another session")), 403, "this token is for another session", false},
		{"not authenticated", "/v1/sessions/s-1/vnc", "", deny(fmt.Errorf("no token: %w", ErrUnauthenticated)), 401, "no token: unauthenticated", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig(), Deps{AuthorizeVNC: tt.authorize})
			origin := tt.origin
			if origin == "" {
				origin = h.srv.URL
			}
			_, resp, err := dialVNC(t, h, tt.path, http.Header{"Origin": {origin}})
			if err == nil || resp == nil {
				t.Fatalf("upgrade accepted: %v", err)
			}
			var body struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if resp.StatusCode != tt.want || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("status %d %q, want %d JSON", resp.StatusCode, resp.Header.Get("Content-Type"), tt.want)
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || !strings.Contains(body.Message, tt.message) || body.Code == 0 {
				t.Fatalf("body %+v (%v), want message %q", body, err, tt.message)
			}
			if got := len(h.display.firstSig) > 0; got != tt.reached {
				t.Fatalf("node reached: %v, want %v", got, tt.reached)
			}
		})
	}

	t.Run("plain GET", func(t *testing.T) {
		h := newHarness(t, DefaultConfig(), Deps{})
		resp, err := http.Get(h.srv.URL + "/v1/sessions/s-1/vnc")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUpgradeRequired {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

func TestVNCDisplayThatNeverAnswers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.VNCConnectTimeout = 50 * time.Millisecond
	h := newHarness(t, cfg, Deps{})
	_, resp, err := dialVNC(t, h, "/v1/sessions/silent/vnc", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("upgrade: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "the display of session silent did not answer within 50ms") {
		t.Fatalf("body %s", body)
	}
	waitEnded(t, h.display, "silent")
}

func TestVNCViewOnly(t *testing.T) {
	allow := func(viewOnly bool) func(*http.Request, string) (bool, error) {
		return func(*http.Request, string) (bool, error) { return viewOnly, nil }
	}
	tests := []struct {
		name      string
		query     string
		authorize func(*http.Request, string) (bool, error)
		want      bool
	}{
		{"viewer chooses control", "", nil, false},
		{"viewer asks to watch", "?view_only=true", nil, true},
		{"viewer asks for control explicitly", "?view_only=false", nil, false},
		{"token allows control", "", allow(false), false},
		{"token allows control, viewer watches", "?view_only=1", allow(false), true},
		{"token allows watching only", "?view_only=false", allow(true), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig(), Deps{AuthorizeVNC: tt.authorize})
			if _, _, err := dialVNC(t, h, "/v1/sessions/s-1/vnc"+tt.query, nil); err != nil {
				t.Fatal(err)
			}
			if got := h.display.lastFirst().GetViewOnly(); got != tt.want {
				t.Fatalf("view_only %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOriginAllowed(t *testing.T) {
	tests := []struct {
		origin  string
		allowed []string
		want    bool
	}{
		{"http://gw.local:8080", nil, true},
		{"http://GW.local:8080", nil, true},
		{"http://gw.local:9090", nil, false},
		{"https://evil.example", nil, false},
		{"null", nil, false},
		{"https://app.example.com", []string{"https://app.example.com"}, true},
		{"http://app.example.com", []string{"https://app.example.com"}, false},
		{"https://app.example.com", []string{"https://app.example.com/"}, true},
		{"https://a.example.com", []string{"*.example.com"}, true},
		{"https://example.com.evil", []string{"*.example.com"}, false},
	}
	for _, tt := range tests {
		g := &Gateway{cfg: Config{AllowedOrigins: tt.allowed}}
		if got := g.originAllowed(tt.origin, "gw.local:8080"); got != tt.want {
			t.Errorf("originAllowed(%q, %v) = %v, want %v", tt.origin, tt.allowed, got, tt.want)
		}
	}
}

// settle waits until a counter stops moving and returns where it stopped.
func settle(t *testing.T, read func() int64) int64 {
	t.Helper()
	last, same := read(), 0
	deadline := time.Now().Add(60 * time.Second)
	for same < 20 {
		if time.Now().After(deadline) {
			t.Fatal("the counter never settled: nothing pushes back")
		}
		time.Sleep(25 * time.Millisecond)
		if v := read(); v == last {
			same++
		} else {
			last, same = v, 0
		}
	}
	return last
}

// The gateway holds at most a message each way: when one side stops reading,
// the other is made to wait instead of filling memory. The bound allows for
// the kernel's socket buffers and gRPC's flow-control windows.
func TestVNCBackpressure(t *testing.T) {
	const total, bound = 48 << 20, 32 << 20

	t.Run("node to a viewer that does not read", func(t *testing.T) {
		h := newHarness(t, DefaultConfig(), Deps{})
		h.display.floodTotal = total
		c, _, err := dialVNC(t, h, "/v1/sessions/flood/vnc", nil)
		if err != nil {
			t.Fatal(err)
		}
		held := settle(t, h.display.floodSent.Load)
		if held >= bound {
			t.Fatalf("the node sent %d MiB to a viewer that read nothing", held>>20)
		}
		// Then everything arrives, in order.
		var got int64
		for got < total {
			_, b, err := c.Read(context.Background())
			if err != nil {
				t.Fatalf("after %d bytes: %v", got, err)
			}
			for i, x := range b {
				if want := byte((got + int64(i)) % 251); x != want {
					t.Fatalf("byte %d is %d, want %d", got+int64(i), x, want)
				}
			}
			got += int64(len(b))
		}
		t.Logf("held back at %d MiB of %d", held>>20, total>>20)
	})

	t.Run("viewer to a node that does not read", func(t *testing.T) {
		h := newHarness(t, DefaultConfig(), Deps{})
		c, _, err := dialVNC(t, h, "/v1/sessions/sink/vnc", nil)
		if err != nil {
			t.Fatal(err)
		}
		var written atomic.Int64
		done := make(chan error, 1)
		go func() {
			msg := make([]byte, 64<<10)
			for written.Load() < total {
				if err := c.Write(context.Background(), websocket.MessageBinary, msg); err != nil {
					done <- err
					return
				}
				written.Add(int64(len(msg)))
			}
			done <- nil
		}()
		held := settle(t, written.Load)
		if held >= bound {
			t.Fatalf("the viewer wrote %d MiB to a node that read nothing", held>>20)
		}
		close(h.display.sinkGo)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 20*time.Second, func() bool { return h.display.sinkGot.Load() == total }, "the node to receive every byte")
		t.Logf("held back at %d MiB of %d", held>>20, total>>20)
	})
}

func TestCloseEndsLiveVNC(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	c, _, err := dialVNC(t, h, "/v1/sessions/s-1/vnc", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A viewer reads all the time, so it answers the close frame at once.
	readErr := make(chan error, 1)
	go func() {
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				readErr <- err
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.gw.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-readErr; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("read after Close: %v, want a going-away close", err)
	}
	waitEnded(t, h.display, "s-1")
	_, resp, err := dialVNC(t, h, "/v1/sessions/s-1/vnc", nil)
	if err == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a new connection after Close: %v", err)
	}
}

// BenchmarkVNCRelay measures RFB bytes from the node to a viewer through the
// gateway (gRPC stream in, WebSocket out).
func BenchmarkVNCRelay(b *testing.B) {
	h := newHarness(b, DefaultConfig(), Deps{})
	const chunk = 32 << 10
	h.display.floodTotal = int64(b.N) * chunk
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, wsURL(h, "/v1/sessions/flood/vnc"), &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {h.srv.URL}}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	b.SetBytes(chunk)
	b.ResetTimer()
	for got := int64(0); got < h.display.floodTotal; {
		_, data, err := c.Read(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		got += int64(len(data))
	}
}
