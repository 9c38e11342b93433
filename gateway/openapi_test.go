package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The document says what each route serves: the image, the streams'
// media types and event names, the JSON Lines export, and the routes the
// gateway answers itself.
func TestOpenAPIDocumentSaysWhatIsServed(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	_, body := get(t, h.srv.URL+"/openapi.json", "")
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Produces    []string
			Responses   map[string]struct {
				Description string
				Schema      map[string]any
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	type op struct {
		produces []string
		desc     string
		schema   map[string]any
	}
	ops := map[string]op{}
	for _, methods := range doc.Paths {
		for _, o := range methods {
			ops[o.OperationID] = op{o.Produces, o.Responses["200"].Description, o.Responses["200"].Schema}
		}
	}
	if s := ops["DisplayService_Screenshot"]; s.schema["type"] != "file" || s.produces[0] != "image/png" {
		t.Errorf("screenshot: %+v", s)
	}
	if e := ops["HistoryService_ExportSessionHistory"]; !slices.Equal(e.produces, []string{"application/x-ndjson"}) || e.schema["$ref"] != "#/definitions/v1Entry" {
		t.Errorf("export: %+v", e)
	}
	for id, sse := range map[string]bool{"SandboxService_Exec": false, "SandboxService_DownloadFile": false, "SessionService_WatchSession": true, "AgentService_StreamRunEvents": true} {
		o := ops[id]
		if !slices.Contains(o.produces, "application/x-ndjson") || slices.Contains(o.produces, "text/event-stream") != sse {
			t.Errorf("%s produces %v", id, o.produces)
		}
		if sse && (!strings.Contains(o.desc, "onmessage") || !strings.Contains(o.desc, "`end`")) {
			t.Errorf("%s does not name its events: %s", id, o.desc)
		}
	}
	for path, want := range map[string]string{
		"/v1/sessions/{sessionId}/viewerToken": "post",
		"/v1/viewerTokens/{tokenId}":           "delete",
		"/v1/sessions/{sessionId}/vnc":         "get",
	} {
		if _, ok := doc.Paths[path][want]; !ok {
			t.Errorf("%s %s is not in the document", strings.ToUpper(want), path)
		}
	}
}

// Every route in the document is served: a call to it (with made-up ids)
// gets an answer from its handler, never the gateway's "no such path" or
// "method not allowed".
func TestEveryDocumentedRouteIsServed(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	_, body := get(t, h.srv.URL+"/openapi.json", "")
	var doc struct {
		Paths map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	for path, methods := range doc.Paths {
		for method := range methods {
			url := h.srv.URL + param.ReplaceAllString(path, "s-1")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			req, _ := http.NewRequestWithContext(ctx, strings.ToUpper(method), url, strings.NewReader("{}"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				cancel()
				t.Errorf("%s %s: %v", method, path, err)
				continue
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			cancel()
			if resp.StatusCode == http.StatusMethodNotAllowed || strings.Contains(string(b), "no such path") {
				t.Errorf("%s %s: %d %s", strings.ToUpper(method), path, resp.StatusCode, b)
			}
		}
	}
}
