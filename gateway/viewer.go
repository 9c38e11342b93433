package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/viewer"
)

// Viewer tokens: a signed, short-lived link to one session's live view,
// view-only or with control. A caller with an API key asks for one
// (POST /v1/sessions/{id}/viewerToken); the VNC WebSocket accepts nothing
// else, so a browser never puts an API key in a URL and a shared link opens
// one desktop, in one mode, for minutes.

// maxViewerTokenBody bounds the small JSON body of a token request.
const maxViewerTokenBody = 4 << 10

// viewerLookupTimeout bounds the session lookup before a token is issued.
const viewerLookupTimeout = 10 * time.Second

// issuedCap bounds the tokens this gateway remembers for revocation by id;
// beyond it a token is still issued and can be revoked by the token itself.
const issuedCap = 100000

type viewerTokenRequest struct {
	Mode string `json:"mode"`
	// Both spellings, as grpc-gateway accepts both for the other routes.
	TTLSeconds      *int64 `json:"ttl_seconds"`
	TTLSecondsCamel *int64 `json:"ttlSeconds"`
}

// viewerTokenResponse is in the API's JSON names (lowerCamelCase), as
// grpc-gateway writes every other response.
type viewerTokenResponse struct {
	Token      string `json:"token"`
	TokenID    string `json:"tokenId"`
	SessionID  string `json:"sessionId"`
	Mode       string `json:"mode"`
	ExpireTime string `json:"expireTime"`
	URL        string `json:"url"`
}

// issuedToken is what revocation by id needs to know of a token.
type issuedToken struct {
	tenant string
	mode   viewer.Mode
	expiry time.Time
}

// viewers tracks issued tokens (for revocation by id) and the live views
// each token opened (so a revocation ends them at once on this gateway).
type viewers struct {
	mu      sync.Mutex
	issued  map[string]issuedToken
	sweepAt int
	live    map[string]map[*liveView]struct{}
}

type liveView struct {
	end func()
}

func newViewers() *viewers {
	return &viewers{issued: map[string]issuedToken{}, sweepAt: 1024, live: map[string]map[*liveView]struct{}{}}
}

func (v *viewers) remember(id string, t issuedToken, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.issued) >= v.sweepAt {
		for k, x := range v.issued {
			if !now.Before(x.expiry) {
				delete(v.issued, k)
			}
		}
		v.sweepAt = max(1024, 2*len(v.issued))
	}
	if len(v.issued) < issuedCap {
		v.issued[id] = t
	}
}

func (v *viewers) lookup(id string) (issuedToken, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	t, ok := v.issued[id]
	return t, ok
}

// open registers a live view under its token, with the func that ends it;
// the returned func forgets it.
func (v *viewers) open(tokenID string, end func()) func() {
	lv := &liveView{end: end}
	v.mu.Lock()
	if v.live[tokenID] == nil {
		v.live[tokenID] = map[*liveView]struct{}{}
	}
	v.live[tokenID][lv] = struct{}{}
	v.mu.Unlock()
	return func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		delete(v.live[tokenID], lv)
		if len(v.live[tokenID]) == 0 {
			delete(v.live, tokenID)
		}
	}
}

// endLive ends every live view opened with the token.
func (v *viewers) endLive(tokenID string) {
	v.mu.Lock()
	views := v.live[tokenID]
	v.mu.Unlock()
	for lv := range views {
		lv.end()
	}
}

func writeStatus(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	writeJSON(w, runtime.HTTPStatusFromCode(st.Code()), map[string]any{"code": int(st.Code()), "message": st.Message()})
}

// issueViewerToken answers POST /v1/sessions/{session_id}/viewerToken.
func (g *Gateway) issueViewerToken(w http.ResponseWriter, r *http.Request) {
	if g.deps.Viewer == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]any{"code": int(codes.Unimplemented), "message": "viewer tokens are not configured on this gateway: its live view needs none"})
		return
	}
	sessionID := r.PathValue("session_id")
	var req viewerTokenRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxViewerTokenBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		writeJSON(w, http.StatusBadRequest, map[string]any{"code": int(codes.InvalidArgument),
			"message": "body must be {\"mode\":\"view\"|\"control\",\"ttl_seconds\":N}: " + err.Error()})
		return
	}
	mode := viewer.Mode(strings.ToLower(strings.TrimSpace(req.Mode)))
	if mode == "" {
		mode = viewer.ModeView
	}
	if mode != viewer.ModeView && mode != viewer.ModeControl {
		writeJSON(w, http.StatusBadRequest, map[string]any{"code": int(codes.InvalidArgument), "message": fmt.Sprintf("mode must be \"view\" or \"control\", got %q", req.Mode)})
		return
	}
	ttlSeconds := req.TTLSeconds
	if ttlSeconds == nil {
		ttlSeconds = req.TTLSecondsCamel
	}
	var ttl time.Duration
	if ttlSeconds != nil {
		if *ttlSeconds < 0 || *ttlSeconds > 366*24*3600 {
			writeJSON(w, http.StatusBadRequest, map[string]any{"code": int(codes.InvalidArgument), "message": fmt.Sprintf("ttl_seconds must be positive, got %d (0 or none: the default; longer than the maximum: the maximum)", *ttlSeconds)})
			return
		}
		ttl = time.Duration(*ttlSeconds) * time.Second
	}
	p, authenticated := auth.FromContext(r.Context())
	if authenticated && mode == viewer.ModeControl && !p.Can(auth.ScopeWrite) {
		writeJSON(w, http.StatusForbidden, map[string]any{"code": int(codes.PermissionDenied), "message": "a control viewer token needs a key with the \"write\" scope; this key may ask for mode \"view\" only"})
		return
	}

	// The session service answers as it would the caller itself: another
	// tenant's session is NotFound, exactly as GetSession says.
	ctx := r.Context()
	if a := r.Header.Get("Authorization"); a != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, auth.AuthorizationMD, a)
	}
	ctx, cancel := context.WithTimeout(ctx, viewerLookupTimeout)
	defer cancel()
	resp, err := sessionv1.NewSessionServiceClient(g.deps.Backends.Session).GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: sessionID})
	if err != nil {
		writeStatus(w, err)
		return
	}
	tenant := resp.GetSession().GetTenant()
	if tenant == "" {
		tenant = p.Tenant
	}
	if authenticated && !p.System && p.Tenant != tenant {
		// A session service that did not check the owner: say what it
		// should have said.
		writeJSON(w, http.StatusNotFound, map[string]any{"code": int(codes.NotFound), "message": "session " + sessionID + " not found"})
		return
	}
	tok, claims, err := g.deps.Viewer.IssueViewerToken(sessionID, tenant, mode, ttl)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"code": int(codes.InvalidArgument), "message": err.Error()})
		return
	}
	g.viewers.remember(claims.TokenID, issuedToken{tenant: tenant, mode: mode, expiry: claims.Expiry}, time.Now())
	g.logger.InfoContext(r.Context(), "viewer token issued", "session_id", sessionID, "tenant", tenant, "mode", string(mode),
		"token_id", claims.TokenID, "key_id", p.KeyID, "expire_time", claims.Expiry)
	writeJSON(w, http.StatusOK, viewerTokenResponse{
		Token:      tok,
		TokenID:    claims.TokenID,
		SessionID:  sessionID,
		Mode:       string(mode),
		ExpireTime: claims.Expiry.UTC().Format(time.RFC3339),
		URL:        "/v1/sessions/" + url.PathEscape(sessionID) + "/vnc?" + viewer.QueryParam + "=" + url.QueryEscape(tok),
	})
}

// revokeViewerToken answers DELETE /v1/viewerTokens/{token_id}: the id this
// gateway returned when it issued the token, or the token itself (which
// any replica can check, as it carries its own tenant and expiry).
func (g *Gateway) revokeViewerToken(w http.ResponseWriter, r *http.Request) {
	if g.deps.Viewer == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]any{"code": int(codes.Unimplemented), "message": "viewer tokens are not configured on this gateway"})
		return
	}
	ref := r.PathValue("token_id")
	var t issuedToken
	tokenID := ref
	notFound := func() {
		writeJSON(w, http.StatusNotFound, map[string]any{"code": int(codes.NotFound),
			"message": "viewer token " + truncate(ref, 40) + " not found (this gateway may not have issued it: revoke it with the token itself)"})
	}
	if strings.HasPrefix(ref, "dgv1.") {
		c, err := g.deps.Viewer.ParseViewerToken(ref)
		if err != nil {
			notFound()
			return
		}
		tokenID, t = c.TokenID, issuedToken{tenant: c.Tenant, mode: c.Mode, expiry: c.Expiry}
	} else {
		var ok bool
		if t, ok = g.viewers.lookup(ref); !ok {
			notFound()
			return
		}
	}
	if p, ok := auth.FromContext(r.Context()); ok && !p.System {
		if p.Tenant != t.tenant {
			notFound()
			return
		}
		if t.mode == viewer.ModeControl && !p.Can(auth.ScopeWrite) {
			writeJSON(w, http.StatusForbidden, map[string]any{"code": int(codes.PermissionDenied), "message": "revoking a control viewer token needs a key with the \"write\" scope"})
			return
		}
	}
	if err := g.deps.Viewer.RevokeViewerToken(r.Context(), tokenID, t.expiry); err != nil {
		g.logger.WarnContext(r.Context(), "viewer token revocation failed", "token_id", tokenID, "error", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"code": int(codes.Unavailable), "message": "the revocation could not be recorded; retry shortly"})
		return
	}
	g.viewers.endLive(tokenID)
	g.logger.InfoContext(r.Context(), "viewer token revoked", "token_id", tokenID)
	writeJSON(w, http.StatusOK, map[string]any{"tokenId": tokenID, "revoked": true})
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// vncAdmission is what a viewer token lets a VNC connection do.
type vncAdmission struct {
	claims viewer.Claims
	token  string
}

// admitViewer checks the viewer token of a VNC request. Refusals are
// written to w; ok false means the request was answered.
func (g *Gateway) admitViewer(w http.ResponseWriter, r *http.Request, sessionID string) (vncAdmission, bool) {
	tok := viewer.TokenFromRequest(r)
	claims, err := g.deps.Viewer.VerifyRequest(r.Context(), r, sessionID)
	if err == nil {
		return vncAdmission{claims: claims, token: tok}, true
	}
	code, grpcCode, msg := http.StatusUnauthorized, codes.Unauthenticated, err.Error()
	switch {
	case errors.Is(err, viewer.ErrMissing):
		if b, ok := auth.BearerToken(r.Header.Get("Authorization")); ok && strings.HasPrefix(b, auth.KeyPrefix) {
			msg = "the live view takes a viewer token, not an API key: get one with POST /v1/sessions/" + sessionID + "/viewerToken and connect with ?token=..."
		} else {
			msg = "no viewer token: get one with POST /v1/sessions/" + sessionID + "/viewerToken and connect with ?token=..."
		}
	case errors.Is(err, viewer.ErrWrongSession):
		code, grpcCode = http.StatusForbidden, codes.PermissionDenied
	case errors.Is(err, viewer.ErrMalformed), errors.Is(err, viewer.ErrBadSignature),
		errors.Is(err, viewer.ErrExpired), errors.Is(err, viewer.ErrRevoked):
	default:
		// The revocation store did not answer; the token may be fine.
		g.logger.WarnContext(r.Context(), "vnc: viewer token check failed", "session_id", sessionID, "error", err)
		code, grpcCode, msg = http.StatusServiceUnavailable, codes.Unavailable, "viewer tokens cannot be checked right now; retry shortly"
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="deskgrid-viewer"`)
	}
	writeJSON(w, code, map[string]any{"code": int(grpcCode), "message": msg})
	return vncAdmission{}, false
}

// watchRevocation ends a live view when its token is revoked on another
// gateway replica (a revocation here ends it at once), checking every
// ViewerRecheck until the token expires; a view admitted before expiry
// lives on after it.
func (g *Gateway) watchRevocation(ctx context.Context, end func(), adm vncAdmission, sessionID string) {
	t := time.NewTicker(g.cfg.ViewerRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !time.Now().Before(adm.claims.Expiry) {
			return
		}
		_, err := g.deps.Viewer.VerifyViewerToken(ctx, adm.token, sessionID)
		if errors.Is(err, viewer.ErrRevoked) {
			end()
			return
		}
		if errors.Is(err, viewer.ErrExpired) {
			return
		}
	}
}
