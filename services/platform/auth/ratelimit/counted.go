package ratelimit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/deskgrid/deskgrid/services/platform/auth"
)

// CountedMD marks a gRPC call a gateway makes for a request it has counted
// already. Its value is a MAC, under the internal token, of the call's
// authorization: a client cannot make one (grpc-gateway forwards
// Grpc-Metadata-* headers, so it may well send one), and a mark made for
// one key says nothing about another.
const CountedMD = "deskgrid-rate-counted"

func countedMark(token, authorization string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("deskgrid rate counted\x00"))
	m.Write([]byte(authorization))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// CountedCredentials mark every call that carries a caller's own key (the
// gateway relaying a request it has counted) so the services behind it do
// not count it again. Use them on the gateway's connections only, next to
// a Limiter in front of every route that relays a key.
func CountedCredentials(internalToken string) credentials.PerRPCCredentials {
	return countedCreds{token: internalToken}
}

type countedCreds struct{ token string }

func (c countedCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	a := md.Get(auth.AuthorizationMD)
	if len(a) != 1 {
		return nil, nil // the system's own calls are not limited anyway
	}
	return map[string]string{CountedMD: countedMark(c.token, a[0])}, nil
}

func (countedCreds) RequireTransportSecurity() bool { return false }

// countedAlready reports whether the call carries a valid counted mark.
func (l *Limiter) countedAlready(ctx context.Context) bool {
	if len(l.tokens) == 0 {
		return false
	}
	md, _ := metadata.FromIncomingContext(ctx)
	a := md.Get(auth.AuthorizationMD)
	if len(a) != 1 {
		return false
	}
	for _, mark := range md.Get(CountedMD) {
		for _, t := range l.tokens {
			if hmac.Equal([]byte(mark), []byte(countedMark(t, a[0]))) {
				return true
			}
		}
	}
	return false
}
