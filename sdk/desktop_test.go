package deskgrid_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
)

// rest calls the REST gateway as curl would.
func rest(t *testing.T, srv *deskgridtest.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.HTTPURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+srv.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, v
}

// The clipboard and windows of a real session, with openbox in its
// sandbox, through the SDK and the REST gateway.
func TestClipboardAndWindows(t *testing.T) {
	srv := deskgridtest.Start(t, "-window-manager", "openbox")
	c, err := deskgrid.New(srv.GRPCAddr, deskgrid.WithAPIKey(srv.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{Width: 800, Height: 600})
	if err != nil {
		t.Fatal(err)
	}

	if err := s.SetClipboard(ctx, "héllo 世界"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetClipboard(ctx, "mouse", deskgrid.PrimarySelection()); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Clipboard(ctx); err != nil || got != "héllo 世界" {
		t.Fatalf("clipboard %q, %v", got, err)
	}
	if got, err := s.Clipboard(ctx, deskgrid.PrimarySelection()); err != nil || got != "mouse" {
		t.Fatalf("primary %q, %v", got, err)
	}
	if err := s.SetClipboard(ctx, strings.Repeat("x", 1<<20+1)); !errors.Is(err, deskgrid.ErrInvalidArgument) {
		t.Fatalf("over 1 MiB: %v", err)
	}
	if err := s.Paste(ctx, "вставка 粘贴"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Clipboard(ctx); err != nil || got != "вставка 粘贴" {
		t.Fatalf("clipboard after paste %q, %v", got, err)
	}
	code, v := rest(t, srv, "POST", "/v1/sessions/"+s.GetId()+"/clipboard", `{"text":"from REST ✓"}`)
	if code != 200 {
		t.Fatalf("POST clipboard: %d %v", code, v)
	}
	code, v = rest(t, srv, "GET", "/v1/sessions/"+s.GetId()+"/clipboard", "")
	if code != 200 || v["text"] != "from REST ✓" || v["owned"] != true {
		t.Fatalf("GET clipboard: %d %v", code, v)
	}

}
