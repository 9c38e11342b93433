package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
)

// display answers screenshots for session "s-1" only.
type display struct {
	displayv1.UnimplementedDisplayServiceServer
}

func (display) Screenshot(_ context.Context, r *displayv1.ScreenshotRequest) (*displayv1.ScreenshotResponse, error) {
	if r.GetSessionId() != "s-1" {
		return nil, status.Errorf(codes.NotFound, "no display for session %s", r.GetSessionId())
	}
	return &displayv1.ScreenshotResponse{ContentType: "image/png", Data: []byte("\x89PNG-bytes"), Width: 2, Height: 1}, nil
}

func newTestGateway(t *testing.T, serving bool) http.Handler {
	t.Helper()
	conn := grpcservertest.Serve(t, func(r grpc.ServiceRegistrar) { displayv1.RegisterDisplayServiceServer(r, display{}) },
		grpcservertest.Options{NotServing: !serving})
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 1024
	g, err := New(context.Background(), cfg, Deps{Backends: Backends{Session: conn, Node: conn, Agent: conn, History: conn}})
	if err != nil {
		t.Fatal(err)
	}
	return g.Handler()
}

func serve(h http.Handler, method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestScreenshotIsTheImageUnlessJSONIsAsked(t *testing.T) {
	h := newTestGateway(t, true)
	w := serve(h, "GET", "/v1/sessions/s-1/screenshot", "", nil)
	if w.Code != 200 || w.Header().Get("Content-Type") != "image/png" || w.Body.String() != "\x89PNG-bytes" {
		t.Fatalf("raw: %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
	if w.Header().Get("X-Deskgrid-Width") != "2" {
		t.Fatalf("width header %q", w.Header().Get("X-Deskgrid-Width"))
	}
	w = serve(h, "GET", "/v1/sessions/s-1/screenshot", "", map[string]string{"Accept": "application/json"})
	var got struct {
		ContentType string `json:"contentType"`
		Data        []byte `json:"data"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 || !bytes.Equal(got.Data, []byte("\x89PNG-bytes")) {
		t.Fatalf("json: %d %s %v", w.Code, w.Body, err)
	}
	w = serve(h, "GET", "/v1/sessions/s-2/screenshot", "", nil)
	if w.Code != 404 || !strings.Contains(w.Body.String(), "no display for session s-2") || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("unknown session: %d %q %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
}

func TestHTTPErrors(t *testing.T) {
	h := newTestGateway(t, true)
	tests := []struct {
		name, method, path, body string
		want                     int
	}{
		{"body too large", "POST", "/v1/sessions/s-1/actions", `{"actions":[` + strings.Repeat(`{},`, 2000) + `{}]}`, http.StatusRequestEntityTooLarge},
		{"wrong method", "PUT", "/v1/sessions/s-1/screenshot", "", http.StatusMethodNotAllowed},
		{"no such API path", "GET", "/v1/nothing", "", http.StatusNotFound},
		{"no such path", "GET", "/nothing", "", http.StatusNotFound},
		{"unknown field", "POST", "/v1/sessions/s-1/actions", `{"nope":1}`, http.StatusBadRequest},
		{"malformed", "POST", "/v1/sessions/s-1/actions", `{"actions":`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := serve(h, tt.method, tt.path, tt.body, nil)
			if w.Code != tt.want {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tt.want)
			}
			var e struct {
				Message string `json:"message"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Message == "" {
				t.Fatalf("body %q is not a JSON error", w.Body)
			}
		})
	}
}

func TestHealthReadinessAndOpenAPI(t *testing.T) {
	h := newTestGateway(t, true)
	if w := serve(h, "GET", "/healthz", "", nil); w.Code != 200 {
		t.Fatalf("healthz %d", w.Code)
	}
	if w := serve(h, "GET", "/readyz", "", nil); w.Code != 200 || !strings.Contains(w.Body.String(), `"ready":true`) {
		t.Fatalf("readyz %d %s", w.Code, w.Body)
	}
	w := serve(h, "GET", "/openapi.json", "", nil)
	b, _ := io.ReadAll(w.Body)
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.Paths["/v1/sessions"] == nil {
		t.Fatalf("openapi: %v", err)
	}

	notReady := newTestGateway(t, false)
	if w := serve(notReady, "GET", "/readyz", "", nil); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with a backend not serving: %d %s", w.Code, w.Body)
	}
}
