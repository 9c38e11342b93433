package gateway

import (
	"net/http"
	"strings"

	"github.com/deskgrid/deskgrid/services/platform/auth"
)

// Authentication at the edge. With a Verifier every API route (/v1/*, the
// event streams, /mcp) needs "Authorization: Bearer <API key>"; the console's
// pages, its scripts and noVNC stay open because they hold no data, and so
// do health, readiness and the API index (which tells the console whether to
// ask for a key). The VNC WebSocket takes viewer tokens instead (viewer.go).
//
// The gateway checks the key and the scope the HTTP method implies; the
// backends check both again, and the tenant, because grpc-gateway forwards
// the Authorization header to them as metadata.

// protect wraps an API handler: authentication (when configured), then the
// rate limit, counted per key.
func (g *Gateway) protect(next http.Handler) http.Handler {
	if g.deps.RateLimit != nil {
		next = g.deps.RateLimit.Middleware(next)
	}
	if g.deps.Verifier == nil {
		return next
	}
	return auth.Middleware(g.deps.Verifier, auth.HTTPOptions{
		// Each protected route is wrapped on its own; none of them is open.
		OpenPaths: []string{},
		// /metrics is wrapped only when it needs a key.
		MetricsNeedKey: true,
		Scope:          requiredScope,
	})(next)
}

// requiredScope is the scope a request needs at the gateway. Reading
// methods need read, others write, except where the handler or the
// backends decide per call: MCP is JSON-RPC over POST whose tools the
// backends authorise one by one, and viewer tokens need write only for
// control (checked by their handlers).
func requiredScope(r *http.Request) auth.Scope {
	p := r.URL.Path
	switch {
	case p == "/mcp" || strings.HasPrefix(p, "/mcp/"):
		return auth.ScopeRead
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/v1/sessions/") && strings.HasSuffix(p, "/viewerToken"):
		return auth.ScopeRead
	case r.Method == http.MethodDelete && strings.HasPrefix(p, "/v1/viewerTokens/"):
		return auth.ScopeRead
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return auth.ScopeRead
	}
	return auth.ScopeWrite
}
