package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClipboardCLI sets and reads a session's clipboard with deskgrid
// clipboard: text on CLIPBOARD and PRIMARY, and a PNG image byte-exact;
// bad input is refused.
func TestClipboardCLI(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	a := p.createWith(`{"display":{"width":320,"height":240}}`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"clipboard", a.ID, "-addr", p.grpc, "-api-key", p.key}, args...), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	if out, err := cli("set", "Grüße ✓"); err != nil {
		t.Fatalf("set: %v %s", err, out)
	}
	if out, err := cli("set", "-primary", "mouse"); err != nil {
		t.Fatalf("set -primary: %v %s", err, out)
	}
	if out, err := cli(); err != nil || out != "Grüße ✓\n" {
		t.Fatalf("get: %q %v", out, err)
	}
	if out, err := cli("get", "-primary"); err != nil || out != "mouse\n" {
		t.Fatalf("get -primary: %q %v", out, err)
	}

	img := image.NewNRGBA(image.Rect(0, 0, 64, 48))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in, got := filepath.Join(dir, "in.png"), filepath.Join(dir, "out.png")
	if err := os.WriteFile(in, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cli("set", "-png", in); err != nil {
		t.Fatalf("set -png: %v %s", err, out)
	}
	if out, err := cli("get", "-png", got); err != nil {
		t.Fatalf("get -png: %v %s", err, out)
	}
	if data, err := os.ReadFile(got); err != nil || !bytes.Equal(data, b.Bytes()) {
		t.Fatalf("the image read back: %d bytes, %v; want %d equal", len(data), err, b.Len())
	}
	// The same through REST: the image base64 in data.
	code, body, _ := p.do("GET", "/v1/sessions/"+a.ID+"/clipboard?mime_type=image/png", "")
	var js struct {
		Data     []byte `json:"data"`
		MimeType string `json:"mimeType"`
	}
	if err := json.Unmarshal(body, &js); code != 200 || err != nil || !bytes.Equal(js.Data, b.Bytes()) || js.MimeType != "image/png" {
		t.Fatalf("REST get image: %d %v %.200s", code, err, body)
	}
	req, _ := json.Marshal(map[string]any{"mime_type": "image/png", "data": b.Bytes()[:100]})
	if code, body, _ := p.do("POST", "/v1/sessions/"+a.ID+"/clipboard", string(req)); code != 200 {
		t.Fatalf("REST set image: %d %s", code, body)
	}
	if code, body, _ := p.do("POST", "/v1/sessions/"+a.ID+"/clipboard", `{"mime_type":"image/png","data":"R0lGODlh"}`); code != 400 {
		t.Errorf("REST set a GIF: %d %s", code, body)
	}
	if code, body, _ := p.do("GET", "/v1/sessions/"+a.ID+"/clipboard?mime_type=image/png", ""); code != 200 || !strings.Contains(string(body), base64.StdEncoding.EncodeToString(b.Bytes()[:100])) {
		t.Fatalf("REST get image set by REST: %d %.200s", code, body)
	}

	// Text asked of an image, an image that is no PNG, bad arguments.
	if out, err := cli(); err == nil || !strings.Contains(out+err.Error(), "image/png") {
		t.Errorf("text of an image: %q %v", out, err)
	}
	if err := os.WriteFile(in, []byte("GIF89a"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cli("set", "-png", in); err == nil || !strings.Contains(out+err.Error(), "PNG") {
		t.Errorf("set a GIF: %q %v", out, err)
	}
	for _, args := range [][]string{{"set"}, {"set", "-png", in, "text"}, {"frob"}} {
		if _, err := cli(args...); err == nil {
			t.Errorf("clipboard %v: no error", args)
		}
	}
}
