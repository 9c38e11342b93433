package viewer

import (
	"context"
	"net/http"
	"strings"
)

// QueryParam is the URL parameter that carries a viewer token: a browser's
// WebSocket cannot set an Authorization header. Tokens are short-lived, so
// one in a URL is an acceptable risk; keep gateway access logs from
// recording query strings all the same.
const QueryParam = "token"

// TokenFromRequest finds a viewer token in r: the "token" query parameter,
// or an "Authorization: Bearer dgv1...." header.
func TokenFromRequest(r *http.Request) string {
	if t := r.URL.Query().Get(QueryParam); t != "" {
		return t
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if ok && strings.EqualFold(scheme, "bearer") && strings.HasPrefix(strings.TrimSpace(tok), tokenPrefix) {
		return strings.TrimSpace(tok)
	}
	return ""
}

// VerifyRequest checks the viewer token r carries for sessionID; it is
// what the gateway's VNC WebSocket calls before it bridges anything.
func (i *Issuer) VerifyRequest(ctx context.Context, r *http.Request, sessionID string) (Claims, error) {
	tok := TokenFromRequest(r)
	if tok == "" {
		return Claims{}, ErrMissing
	}
	return i.VerifyViewerToken(ctx, tok, sessionID)
}
