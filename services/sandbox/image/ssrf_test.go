package image

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestRegistryAnswersStayOnTheNode pulls, as a tenant, references aimed at
// what the node reaches and the tenant should not: an internal service
// named directly, or as the token realm of the tenant's own registry's
// 401. The error tells the status, never what the service answered; the
// cloud's metadata address is not dialled at all.
func TestRegistryAnswersStayOnTheNode(t *testing.T) {
	ctx := context.Background()
	const secret = "AKIA-NODE-ONLY-SECRET"
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "path=%s credentials=%s", r.URL.Path, secret)
	}))
	t.Cleanup(internal.Close)
	realmOf := func(realm string) string {
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`",service="evil"`)
			w.WriteHeader(http.StatusUnauthorized)
		}))
		t.Cleanup(evil.Close)
		return strings.TrimPrefix(evil.URL, "http://")
	}
	s, _ := newStore(t)
	for _, tc := range []struct {
		name, ref string
		code      codes.Code
		says      string
	}{
		{"internal service named as a registry", strings.TrimPrefix(internal.URL, "http://") + "/team/app:v1", codes.FailedPrecondition, "403 Forbidden"},
		{"internal service as the realm", realmOf(internal.URL+"/latest/meta-data/iam/security-credentials/role") + "/team/app:v1", codes.FailedPrecondition, "403 Forbidden"},
		{"metadata address as the realm", realmOf("http://169.254.169.254/latest/meta-data/") + "/team/app:v1", codes.Unavailable, "link-local"},
		{"metadata address named as a registry", "169.254.169.254/team/app:v1", codes.Unavailable, "link-local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Pull(ctx, "acme", tc.ref, nil)
			wantCode(t, err, tc.code)
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "credentials=") {
				t.Fatalf("the service's answer reached the tenant: %v", err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %q does not say %q", err, tc.says)
			}
		})
	}
}
