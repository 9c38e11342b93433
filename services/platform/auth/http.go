package auth

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
)

// HTTPOptions configure Middleware.
type HTTPOptions struct {
	// OpenPaths need no credentials: an entry ending in "/" is a prefix,
	// anything else an exact path. Default: /healthz and /readyz. Routes
	// that check their own credentials (the VNC WebSocket takes viewer
	// tokens) belong here too.
	OpenPaths []string
	// MetricsNeedKey puts /metrics behind a key with the read scope;
	// otherwise /metrics is open.
	MetricsNeedKey bool
	// Scope picks the scope a request needs; nil: GET, HEAD and OPTIONS
	// need read, other methods write.
	Scope func(r *http.Request) Scope
}

// Middleware authenticates HTTP requests the way the gRPC interceptors do
// ("Authorization: Bearer <key>") and puts the Principal in the request
// context. Refusals are JSON in the gateway's error shape: 401 with a
// WWW-Authenticate challenge, 403 for a missing scope, 503 when the key
// store cannot answer.
func Middleware(v *Verifier, opts HTTPOptions) func(http.Handler) http.Handler {
	if opts.OpenPaths == nil {
		opts.OpenPaths = []string{"/healthz", "/readyz"}
	}
	if !opts.MetricsNeedKey {
		opts.OpenPaths = append(opts.OpenPaths[:len(opts.OpenPaths):len(opts.OpenPaths)], "/metrics")
	}
	if opts.Scope == nil {
		opts.Scope = func(r *http.Request) Scope {
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
				return ScopeRead
			}
			return ScopeWrite
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if pathOpen(opts.OpenPaths, r.URL.Path) {
				next.ServeHTTP(w, r)
				return
			}
			vals := r.Header.Values("Authorization")
			if len(vals) > 1 {
				writeError(w, http.StatusUnauthorized, codes.Unauthenticated, "more than one Authorization header: send exactly one")
				return
			}
			var token string
			if len(vals) == 1 {
				t, ok := BearerToken(vals[0])
				if !ok {
					writeError(w, http.StatusUnauthorized, codes.Unauthenticated, "Authorization must be \"Bearer <API key>\"")
					return
				}
				token = t
			}
			p, err := v.Verify(r.Context(), token)
			if err != nil {
				if errors.Is(err, ErrKeyLookup) {
					writeError(w, http.StatusServiceUnavailable, codes.Unavailable, ErrKeyLookup.Error())
					return
				}
				writeError(w, http.StatusUnauthorized, codes.Unauthenticated, err.Error())
				return
			}
			if p.System {
				p.Tenant = strings.TrimSpace(r.Header.Get(TenantMD))
			}
			if scope := opts.Scope(r); !p.Can(scope) {
				writeError(w, http.StatusForbidden, codes.PermissionDenied, "this API key lacks the \""+string(scope)+"\" scope this request needs; create a key with it")
				return
			}
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
		})
	}
}

func pathOpen(open []string, path string) bool {
	for _, o := range open {
		if o == path || (strings.HasSuffix(o, "/") && strings.HasPrefix(path, o)) {
			return true
		}
	}
	return false
}

func writeError(w http.ResponseWriter, httpCode int, code codes.Code, msg string) {
	if httpCode == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="deskgrid"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{int(code), msg})
}
