package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth/viewer"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/platform/trail"
)

// ErrUnauthenticated is what an AuthorizeVNC hook wraps when the request
// carries no usable credentials: the upgrade is refused with 401, not 403.
var ErrUnauthenticated = errors.New("unauthenticated")

// vncChunk bounds one gRPC message of RFB bytes, far below the 4 MiB default
// receive limit, so a large viewer message (a clipboard paste) never trips it.
const vncChunk = 32 << 10

// vnc bridges a viewer's RFB-over-WebSocket connection (noVNC speaks it) to
// DisplayService.ConnectVNC on the session's node.
//
// Nothing is buffered beyond one message each way: a pump blocks on its write
// (gRPC flow control one way, the WebSocket's TCP send the other) before it
// reads again, so a slow side slows the other instead of growing memory.
func (g *Gateway) vnc(w http.ResponseWriter, r *http.Request) {
	sessionID := r.PathValue("session_id")
	if !isWebSocketUpgrade(r) {
		writeJSON(w, http.StatusUpgradeRequired, map[string]any{"code": int(codes.InvalidArgument), "message": "this path is a WebSocket (RFB) endpoint: connect with a VNC WebSocket client such as noVNC"})
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && !g.originAllowed(origin, r.Host) {
		writeJSON(w, http.StatusForbidden, map[string]any{"code": int(codes.PermissionDenied), "message": "origin " + origin + " may not open a VNC connection; add it to the gateway's allowed origins"})
		return
	}
	viewOnly := false
	if v := r.URL.Query().Get("view_only"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"code": int(codes.InvalidArgument), "message": "view_only must be true or false, got " + strconv.Quote(v)})
			return
		}
		viewOnly = b
	}
	var adm vncAdmission
	admitted := false
	if g.deps.Viewer != nil {
		if adm, admitted = g.admitViewer(w, r, sessionID); !admitted {
			return
		}
		// A view token watches, whatever the viewer asks.
		viewOnly = viewOnly || adm.claims.Mode != viewer.ModeControl
	}
	if g.deps.AuthorizeVNC != nil {
		forced, err := g.deps.AuthorizeVNC(r, sessionID)
		if err != nil {
			code, grpcCode := http.StatusForbidden, codes.PermissionDenied
			if errors.Is(err, ErrUnauthenticated) {
				code, grpcCode = http.StatusUnauthorized, codes.Unauthenticated
			}
			writeJSON(w, code, map[string]any{"code": int(grpcCode), "message": err.Error()})
			return
		}
		// The viewer may always ask for less than it is allowed, never more.
		viewOnly = viewOnly || forced
	}

	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"code": int(codes.Unavailable), "message": "the gateway is shutting down"})
		return
	}
	g.bridges.Add(1)
	g.mu.Unlock()
	defer g.bridges.Done()

	// The bridge's own context: the request's ends when this handler
	// returns, and after the upgrade it no longer follows the client.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	stop := context.AfterFunc(r.Context(), cancel)
	defer stop()
	stopBase := context.AfterFunc(g.base, cancel)
	defer stopBase()

	nodeCtx := ctx
	if admitted && g.deps.NodeCredentials != nil {
		// The node is called as the gateway, acting for the token's tenant:
		// the viewer holds no API key, and ConnectVNC is not open to one.
		nodeCtx = g.deps.NodeCredentials(ctx, adm.claims.Tenant)
		// The session's history names the viewer, not just the gateway.
		nodeCtx = metadata.AppendToOutgoingContext(nodeCtx, trail.ViewerMD, adm.claims.TokenID)
	}
	stream, first, err := g.openVNC(nodeCtx, sessionID, viewOnly)
	if err != nil {
		code, msg := vncOpenError(err)
		g.logger.InfoContext(r.Context(), "vnc: refused", "session_id", sessionID, "status", code, "error", err)
		writeJSON(w, code, map[string]any{"code": int(status.Code(err)), "message": msg})
		return
	}
	// Hijacked from here on: the request context no longer follows the client.
	stop()
	if !stopBase() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"code": int(codes.Unavailable), "message": "the gateway is shutting down"})
		return
	}

	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{"binary"},
		// The origin was checked above, where a refusal can say why in JSON.
		InsecureSkipVerify: true,
		// RFB has its own encodings; deflating them again costs CPU for little.
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		g.logger.InfoContext(ctx, "vnc: upgrade failed", "session_id", sessionID, "error", err)
		return
	}
	conn.SetReadLimit(g.cfg.VNCMaxMessageBytes)
	// Closing the gateway tells the viewer why; the viewer's answer to the
	// close frame ends the read pump, which ends the rest.
	defer context.AfterFunc(g.base, func() {
		_ = conn.Close(websocket.StatusGoingAway, "the gateway is shutting down")
	})()
	if admitted {
		// Revoking the token ends the view, saying why; the viewer's answer
		// to the close frame ends the pumps.
		var once sync.Once
		end := func() {
			once.Do(func() {
				go func() { _ = conn.Close(websocket.StatusPolicyViolation, "the viewer token was revoked") }()
			})
		}
		defer g.viewers.open(adm.claims.TokenID, end)()
		go g.watchRevocation(ctx, end, adm, sessionID)
	}
	start := time.Now()
	g.logger.InfoContext(ctx, "vnc: viewer connected", "session_id", sessionID, "view_only", viewOnly, "remote", r.RemoteAddr,
		"token_id", adm.claims.TokenID, "tenant", adm.claims.Tenant)

	disconnected := metrics.VNCViewer(ctx, viewOnly)
	var toViewer, fromViewer int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		fromViewer = pumpViewerToNode(ctx, conn, stream)
	}()
	toViewer, closeErr := pumpNodeToViewer(ctx, conn, stream, first)
	// Close before cancelling: a cancelled read drops the connection without
	// the close frame that tells the viewer why.
	switch {
	case ctx.Err() != nil:
		// The viewer left or the gateway is closing; nobody is left to tell.
	case closeErr == nil:
		_ = conn.Close(websocket.StatusNormalClosure, "the desktop ended the connection")
	default:
		code := websocket.StatusInternalError
		switch status.Code(closeErr) {
		case codes.NotFound, codes.Unavailable, codes.Aborted:
			// The desktop was deleted or its node went away.
			code = websocket.StatusGoingAway
		}
		_ = conn.Close(code, closeReason(closeErr))
	}
	cancel()
	<-done
	_ = conn.CloseNow()
	disconnected(toViewer, fromViewer)
	g.logger.InfoContext(ctx, "vnc: viewer disconnected", "session_id", sessionID,
		"bytes_to_viewer", toViewer, "bytes_from_viewer", fromViewer, "duration", time.Since(start).Round(time.Millisecond))
}

// openVNC opens the gRPC stream and waits for the node's first RFB bytes (an
// RFB server speaks first), so an unknown session or a dead display is
// answered as a plain HTTP error before the WebSocket exists.
func (g *Gateway) openVNC(ctx context.Context, sessionID string, viewOnly bool) (displayv1.DisplayService_ConnectVNCClient, []byte, error) {
	stream, err := displayv1.NewDisplayServiceClient(g.deps.Backends.Node).ConnectVNC(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := stream.Send(&displayv1.ConnectVNCRequest{SessionId: sessionID, ViewOnly: viewOnly}); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	// A server that ends the stream makes Send return io.EOF; Recv carries its status.
	type result struct {
		resp *displayv1.ConnectVNCResponse
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := stream.Recv()
		got <- result{resp, err}
	}()
	timer := time.NewTimer(g.cfg.VNCConnectTimeout)
	defer timer.Stop()
	select {
	case res := <-got:
		if res.err != nil {
			if errors.Is(res.err, io.EOF) {
				return nil, nil, status.Errorf(codes.Unavailable, "the display of session %s closed the VNC connection before it started", sessionID)
			}
			return nil, nil, res.err
		}
		return stream, res.resp.GetData(), nil
	case <-timer.C:
		return nil, nil, status.Errorf(codes.DeadlineExceeded, "the display of session %s did not answer within %s", sessionID, g.cfg.VNCConnectTimeout)
	case <-ctx.Done():
		return nil, nil, status.FromContextError(ctx.Err()).Err()
	}
}

func vncOpenError(err error) (int, string) {
	st := status.Convert(err)
	return runtime.HTTPStatusFromCode(st.Code()), st.Message()
}

// pumpNodeToViewer forwards the node's RFB bytes, starting with first. It
// returns the bytes sent and nil when the node ended the stream cleanly.
func pumpNodeToViewer(ctx context.Context, conn *websocket.Conn, stream displayv1.DisplayService_ConnectVNCClient, first []byte) (int64, error) {
	var n int64
	data := first
	for {
		if len(data) > 0 {
			if err := conn.Write(ctx, websocket.MessageBinary, data); err != nil {
				return n, err
			}
			n += int64(len(data))
		}
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		data = resp.GetData()
	}
}

// pumpViewerToNode forwards the viewer's RFB bytes until either side ends.
func pumpViewerToNode(ctx context.Context, conn *websocket.Conn, stream displayv1.DisplayService_ConnectVNCClient) int64 {
	var n int64
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return n
		}
		if typ != websocket.MessageBinary {
			_ = conn.Close(websocket.StatusUnsupportedData, "RFB travels in binary messages")
			return n
		}
		for len(data) > 0 {
			c := data[:min(len(data), vncChunk)]
			if err := stream.Send(&displayv1.ConnectVNCRequest{Data: c}); err != nil {
				return n
			}
			n += int64(len(c))
			data = data[len(c):]
		}
	}
}

// closeReason fits an error into a WebSocket close frame (123 bytes at most).
func closeReason(err error) string {
	s := status.Convert(err).Message()
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

func isWebSocketUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// originAllowed lets the gateway's own pages in (same host) and the origins
// the operator listed, so another site cannot open a desktop in a viewer's
// browser with the viewer's credentials.
func (g *Gateway) originAllowed(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, host) {
		return true
	}
	for _, p := range g.cfg.AllowedOrigins {
		p = strings.ToLower(strings.TrimSuffix(p, "/"))
		target := strings.ToLower(u.Host)
		if strings.Contains(p, "://") {
			target = strings.ToLower(u.Scheme + "://" + u.Host)
		}
		if ok, err := path.Match(p, target); err == nil && ok {
			return true
		}
	}
	return false
}
