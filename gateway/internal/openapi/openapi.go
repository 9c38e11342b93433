// Package openapi holds the OpenAPI document of the public API: what
// protoc-gen-openapiv2 generates from the protos, completed with what the
// gateway serves besides grpc-gateway's JSON: the screenshot as an image,
// streams as newline-delimited JSON or server-sent events, the history
// export as JSON Lines, and the routes the gateway answers itself (viewer
// tokens and the live view's WebSocket).
package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

// generated is protoc-gen-openapiv2's merged document.
//
//go:embed deskgrid.swagger.json
var generated []byte

// Document is the OpenAPI (Swagger 2.0) document the gateway serves.
var Document = mustComplete(generated)

// Media types the gateway serves besides JSON.
const (
	NDJSON      = "application/x-ndjson"
	EventStream = "text/event-stream"
)

type object = map[string]any

func mustComplete(gen []byte) []byte {
	b, err := complete(gen)
	if err != nil {
		panic(fmt.Sprintf("openapi: %v", err))
	}
	return b
}

// streams are the server-streaming routes: each reply message is one line
// of JSON ({"result": ...}, or {"error": ...} last); the two event streams
// also answer as server-sent events.
var streams = map[string]struct {
	sse    bool
	events string
}{
	"SandboxService_Exec":          {},
	"SandboxService_DownloadFile":  {},
	"NodeService_PullImageOnNodes": {},
	"SessionService_WatchSession":  {sse: true, events: "`session` (data: a WatchSessionResponse with the session, id: its generation), `process_exited` (data: a WatchSessionResponse with processExited, an autostart program that ended; id: the generation before it), `image_pull` (data: a WatchSessionResponse with imagePull, how far its node has pulled its image while it starts; id: the generation before it) and `end`"},
	"AgentService_StreamRunEvents": {sse: true, events: "the run event's kind (`text_delta`, `thinking_delta`, `tool_call`, `tool_result`, " +
		"`screenshot`, `usage`, `state`, ...; data: a StreamRunEventsResponse, id: the event's sequence) and `end`"},
}

func isStream(id string) bool {
	_, ok := streams[id]
	return ok
}

func complete(gen []byte) ([]byte, error) {
	var doc object
	if err := json.Unmarshal(gen, &doc); err != nil {
		return nil, err
	}
	paths, _ := doc["paths"].(object)
	defs, _ := doc["definitions"].(object)
	if paths == nil || defs == nil {
		return nil, fmt.Errorf("the generated document has no paths or definitions")
	}
	found := map[string]bool{}
	for _, item := range paths {
		for _, o := range item.(object) {
			op, ok := o.(object)
			if !ok {
				continue
			}
			id, _ := op["operationId"].(string)
			found[id] = true
			ok200, _ := op["responses"].(object)["200"].(object)
			switch {
			case id == "DisplayService_Screenshot":
				op["produces"] = []any{"image/png", "image/jpeg", "application/json"}
				ok200["description"] = "The image itself, `image/png` (or `image/jpeg` as `format` asks), its size in the " +
					"`X-Deskgrid-Width` and `X-Deskgrid-Height` headers. With `Accept: application/json`, a " +
					"ScreenshotResponse with the bytes base64 in `data`."
				ok200["schema"] = object{"type": "file"}
				ok200["headers"] = object{
					"X-Deskgrid-Width":  object{"type": "integer", "description": "The image's width in pixels."},
					"X-Deskgrid-Height": object{"type": "integer", "description": "The image's height in pixels."},
				}
			case id == "HistoryService_ExportSessionHistory":
				op["produces"] = []any{NDJSON}
				ok200["description"] = "The export itself, JSON Lines: one Entry in its JSON form per line, in sequence " +
					"order (`curl .../history:export > s.jsonl`; `deskgrid history import` and ImportSessionHistory read it)."
				ok200["schema"] = object{"$ref": "#/definitions/v1Entry"}
				delete(ok200, "examples")
			case isStream(id):
				s := streams[id]
				desc := "A stream, newline-delimited JSON (`" + NDJSON + "`): one object a line, `{\"result\": <message>}`, " +
					"or `{\"error\": <status>}` if the stream fails."
				produces := []any{NDJSON}
				if s.sse {
					produces = append(produces, EventStream)
					desc += " With `Accept: " + EventStream + "`, server-sent events: each is sent twice with the same " +
						"id and data, once named for its type (for `addEventListener`) and once unnamed (for `onmessage`). " +
						"Event names: " + s.events + ", whose data is `{\"code\": <gRPC code>, \"message\": ...}` when the " +
						"stream has finished for good (code 0 when it simply ended). A reconnecting client sends " +
						"`Last-Event-ID` and resumes after it."
				}
				op["produces"] = produces
				ok200["description"] = desc
			}
		}
	}
	for _, id := range []string{"DisplayService_Screenshot", "HistoryService_ExportSessionHistory", "SandboxService_Exec",
		"SandboxService_DownloadFile", "SessionService_WatchSession", "AgentService_StreamRunEvents"} {
		if !found[id] {
			return nil, fmt.Errorf("operation %s is not in the generated document", id)
		}
	}
	addGatewayRoutes(paths, defs)
	tags, _ := doc["tags"].([]any)
	doc["tags"] = append(tags, object{"name": "Gateway", "description": "What the gateway serves itself: viewer tokens and the live view."})
	return json.MarshalIndent(doc, "", "  ")
}

func errorResponses() object {
	return object{"default": object{"description": "An error.", "schema": object{"$ref": "#/definitions/rpcStatus"}}}
}

// addGatewayRoutes describes the routes the gateway answers itself.
func addGatewayRoutes(paths, defs object) {
	sessionParam := object{"name": "sessionId", "in": "path", "required": true, "type": "string", "description": "The session's id."}
	defs["v1ViewerTokenRequest"] = object{
		"type": "object",
		"properties": object{
			"mode": object{"type": "string", "enum": []any{"view", "control"},
				"description": "`view` watches only; `control` may also send input (needs a key with the `write` scope)."},
			"ttl_seconds": object{"type": "integer", "format": "int64",
				"description": "Lifetime; 0 or none is the default, longer than the maximum is the maximum."},
		},
		"example": object{"mode": "view", "ttl_seconds": 600},
	}
	defs["v1ViewerToken"] = object{
		"type": "object",
		"properties": object{
			"token":      object{"type": "string", "description": "The token: pass it as `?token=` to the live view."},
			"tokenId":    object{"type": "string", "description": "Its id, to revoke it."},
			"sessionId":  object{"type": "string"},
			"mode":       object{"type": "string", "enum": []any{"view", "control"}},
			"expireTime": object{"type": "string", "format": "date-time"},
			"url":        object{"type": "string", "description": "The console's viewer page for the session, with the token."},
		},
	}
	defs["v1RevokeViewerTokenResponse"] = object{
		"type": "object",
		"properties": object{
			"tokenId": object{"type": "string"},
			"revoked": object{"type": "boolean"},
		},
	}
	withErrors := func(ok object) object {
		r := errorResponses()
		r["200"] = ok
		return r
	}
	paths["/v1/sessions/{sessionId}/viewerToken"] = object{"post": object{
		"operationId": "Gateway_IssueViewerToken",
		"summary":     "Issue a viewer token",
		"description": "Issues a short-lived signed token that lets a browser watch (mode `view`) or drive (mode `control`) " +
			"one session's desktop through the live view, without an API key.",
		"tags":       []any{"Gateway"},
		"parameters": []any{sessionParam, object{"name": "body", "in": "body", "required": true, "schema": object{"$ref": "#/definitions/v1ViewerTokenRequest"}}},
		"responses":  withErrors(object{"description": "The token.", "schema": object{"$ref": "#/definitions/v1ViewerToken"}}),
	}}
	paths["/v1/viewerTokens/{tokenId}"] = object{"delete": object{
		"operationId": "Gateway_RevokeViewerToken",
		"summary":     "Revoke a viewer token",
		"description": "Revokes a viewer token by its id: live views it opened end, and it opens no new one.",
		"tags":        []any{"Gateway"},
		"parameters":  []any{object{"name": "tokenId", "in": "path", "required": true, "type": "string", "description": "The token's id (`tokenId`)."}},
		"responses":   withErrors(object{"description": "Revoked.", "schema": object{"$ref": "#/definitions/v1RevokeViewerTokenResponse"}}),
	}}
	paths["/v1/sessions/{sessionId}/vnc"] = object{"get": object{
		"operationId": "Gateway_ConnectVNC",
		"summary":     "Watch a desktop live (WebSocket)",
		"description": "A WebSocket (subprotocol `binary`) carrying the session's RFB (VNC) stream, for noVNC and other " +
			"viewers. It takes a viewer token in `?token=`, not an API key.",
		"tags":     []any{"Gateway"},
		"security": []any{},
		"parameters": []any{sessionParam,
			object{"name": "token", "in": "query", "type": "string", "description": "A viewer token of this session."},
			object{"name": "view_only", "in": "query", "type": "boolean", "description": "Watch only, even with a control token."},
		},
		"responses": object{
			"101":     object{"description": "Switching to the WebSocket protocol."},
			"default": object{"description": "The upgrade was refused.", "schema": object{"$ref": "#/definitions/rpcStatus"}},
		},
	}}
}
