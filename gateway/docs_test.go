package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// swagger is the part of the OpenAPI (Swagger 2.0) document the tests read.
type swagger struct {
	Info struct {
		Title, Version, Description string
	}
	SecurityDefinitions map[string]struct {
		Type, Name, In string
	}
	Security []map[string][]string
	Tags     []struct{ Name, Description string }
	Paths    map[string]map[string]struct {
		OperationID string `json:"operationId"`
		Summary     string
		Description string
		Produces    []string
		Tags        []string
		Parameters  []struct {
			In     string
			Schema struct {
				Ref string `json:"$ref"`
			}
		}
		Responses map[string]struct {
			Examples map[string]json.RawMessage
		}
	}
	Definitions map[string]struct {
		Example json.RawMessage
	}
}

func TestDocsPage(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	tests := []struct {
		path, accept string
		contentType  string
		contains     string
	}{
		{"/docs", "", "text/html", `<script type="module" src="/static/docs.js"></script>`},
		{"/static/docs.js", "", "text/javascript", "fetch('/openapi.json'"},
		{"/static/style.css", "", "text/css", ".docs-layout"},
		{"/", "text/html", "text/html", `<a href="/docs">API docs</a>`},
		{"/v1", "", "application/json", `"docs":"/docs"`},
	}
	for _, tt := range tests {
		resp, body := get(t, h.srv.URL+tt.path, tt.accept)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), tt.contentType) || !strings.Contains(body, tt.contains) {
			t.Errorf("GET %s: %d %q, body %.120q; want 200 %s containing %q", tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), body, tt.contentType, tt.contains)
		}
	}
	resp, _ := get(t, h.srv.URL+"/docs", "")
	if csp := resp.Header.Get("Content-Security-Policy"); csp != contentSecurityPolicy {
		t.Errorf("/docs CSP %q, want the console's %q", csp, contentSecurityPolicy)
	}
}

// The document the docs page renders: the header, the bearer key applied
// to every call, and for each main call a summary, a description and JSON
// examples of its request body and response.
func TestOpenAPIDocument(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	resp, body := get(t, h.srv.URL+"/openapi.json", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d", resp.StatusCode)
	}
	var doc swagger
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("/openapi.json: %v", err)
	}
	if doc.Info.Title != "deskgrid API" || doc.Info.Version == "" || !strings.Contains(doc.Info.Description, "Authorization: Bearer <API key>") {
		t.Errorf("info = %+v", doc.Info)
	}
	if d := doc.SecurityDefinitions["bearer"]; d.Type != "apiKey" || d.In != "header" || d.Name != "Authorization" {
		t.Errorf("securityDefinitions = %+v", doc.SecurityDefinitions)
	}
	if len(doc.Security) != 1 || doc.Security[0]["bearer"] == nil {
		t.Errorf("security = %v, want bearer on every operation", doc.Security)
	}
	tagged := map[string]bool{}
	for _, tag := range doc.Tags {
		tagged[tag.Name] = tag.Description != ""
	}

	type op struct {
		summary, description string
		produces             []string
		body                 string // the request body's schema, "" for none
		examples             map[string]json.RawMessage
		tag                  string
	}
	ops := map[string]op{}
	for path, methods := range doc.Paths {
		if strings.HasPrefix(path, "/healthz") || strings.HasPrefix(path, "/readyz") || strings.HasPrefix(path, "/metrics") {
			t.Errorf("%s is in the API document", path)
		}
		for _, o := range methods {
			got := op{summary: o.Summary, description: o.Description, produces: o.Produces, examples: o.Responses["200"].Examples}
			if len(o.Tags) > 0 {
				got.tag = o.Tags[0]
			}
			for _, p := range o.Parameters {
				if p.In == "body" {
					got.body = strings.TrimPrefix(p.Schema.Ref, "#/definitions/")
				}
			}
			ops[o.OperationID] = got
		}
	}
	withBody := map[string]bool{
		"SessionService_CreateSession":  true,
		"DisplayService_PerformActions": true,
		"SandboxService_Exec":           true,
		"SandboxService_WriteFile":      true,
		"AgentService_CreateRun":        true,
	}
	for _, id := range []string{
		"SessionService_CreateSession", "SessionService_GetSession", "SessionService_ListSessions", "SessionService_DeleteSession",
		"DisplayService_Screenshot", "DisplayService_PerformActions",
		"SandboxService_Exec", "SandboxService_ReadFile", "SandboxService_WriteFile",
		"AgentService_CreateRun", "AgentService_StreamRunEvents",
		"HistoryService_ListSessionHistory", "HistoryService_SearchHistory",
	} {
		o, ok := ops[id]
		if !ok {
			t.Errorf("%s: not in the document", id)
			continue
		}
		if o.summary == "" || len(o.description) < 40 {
			t.Errorf("%s: summary %q, description %q", id, o.summary, o.description)
		}
		if !tagged[o.tag] {
			t.Errorf("%s: tag %q has no description", id, o.tag)
		}
		var v any
		if ex := o.examples["application/json"]; json.Unmarshal(ex, &v) != nil {
			t.Errorf("%s: response example %q is not JSON", id, ex)
		}
		if withBody[id] {
			if o.body == "" {
				t.Errorf("%s: no request body", id)
			} else if ex := doc.Definitions[o.body].Example; json.Unmarshal(ex, &v) != nil || len(ex) < 10 {
				t.Errorf("%s: request body %s has example %q", id, o.body, ex)
			}
		}
	}
	if p := ops["DisplayService_Screenshot"].produces; !slices.Contains(p, "image/png") || !slices.Contains(p, "image/jpeg") {
		t.Errorf("Screenshot produces %v, want the image types", p)
	}
	for _, name := range []string{"v1DisplaySpec", "v1Action", "v1Session", "v1CreateSessionRequest"} {
		var v map[string]any
		if err := json.Unmarshal(doc.Definitions[name].Example, &v); err != nil || len(v) == 0 {
			t.Errorf("%s example %q: %v", name, doc.Definitions[name].Example, err)
		}
	}
}

// The page in a browser: linked from the console, every operation shown,
// CreateSession's examples among them.
func TestDocsPageInBrowser(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	runConsoleSpec(t, h.srv.URL, "--scenario", "docs")
}
