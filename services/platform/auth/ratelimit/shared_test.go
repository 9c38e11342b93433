package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deskgrid/deskgrid/services/platform/auth"
)

func redisClient(t *testing.T) *redis.Client {
	u := os.Getenv("DESKGRID_TEST_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func testPrefix(t *testing.T, rdb *redis.Client) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "dgtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), "*"+prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	return prefix
}

// Two gateways sharing Redis allow one key its limit once between them,
// not once each.
func TestTwoGatewaysShareTheLimitInRedis(t *testing.T) {
	rdb := redisClient(t)
	prefix := testPrefix(t, rdb)
	const burst = 10
	var gateways []*httptest.Server
	for range 2 {
		c, err := NewRedis(rdb, RedisConfig{Rate: 0.01, Burst: burst, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		l := limiter(t, c)
		h := l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), auth.Principal{KeyID: "k1"})))
		}))
		t.Cleanup(gw.Close)
		gateways = append(gateways, gw)
	}
	ok, refused := 0, 0
	for i := range 4 * burst {
		resp, err := http.Get(gateways[i%2].URL + "/v1/sessions")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			refused++
			if resp.Header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if ok != burst || refused != 3*burst {
		t.Fatalf("two gateways allowed %d and refused %d of %d; want %d allowed in all", ok, refused, 4*burst, burst)
	}
}

// A Redis that cannot be reached lets requests through rather than taking
// the API down, and says why in the log.
func TestRedisDownLetsRequestsThrough(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := NewRedis(rdb, RedisConfig{Rate: 0.01, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Take(context.Background(), "k"); err == nil {
		t.Fatal("no error from an unreachable Redis")
	}
	l := limiter(t, c)
	for range 3 {
		if ok, _ := l.allow(context.Background(), "k"); !ok {
			t.Fatal("refused while Redis is down")
		}
	}
}

// A call the gateway counted already (it carries a valid counted mark) is
// not counted again; a forged mark, or one made for another key, is.
func TestCountedOnce(t *testing.T) {
	const token = "internal-token"
	handler := func(context.Context, any) (any, error) { return "ok", nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/deskgrid.session.v1.SessionService/ListSessions"}
	mark := func(tok, authorization string) string {
		md, _ := CountedCredentials(tok).GetRequestMetadata(metadata.NewOutgoingContext(context.Background(), metadata.Pairs(auth.AuthorizationMD, authorization)))
		return md[CountedMD]
	}
	if m, _ := CountedCredentials(token).GetRequestMetadata(context.Background()); len(m) != 0 {
		t.Fatalf("a call without a caller's key got a mark: %v", m)
	}
	call := func(l *Limiter, pairs ...string) error {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(pairs...))
		ctx = auth.WithPrincipal(ctx, auth.Principal{KeyID: "k1"})
		_, err := l.UnaryServerInterceptor()(ctx, nil, info, handler)
		return err
	}
	for _, tc := range []struct {
		name      string
		mark      string
		uncounted bool
	}{
		{"marked by the gateway", mark(token, "Bearer k1"), true},
		{"no mark", "", false},
		{"mark made with another token", mark("guess", "Bearer k1"), false},
		{"mark made for another key", mark(token, "Bearer k2"), false},
		{"garbage", "AAAA", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := limiter(t, NewMemory(Config{Rate: 0.001, Burst: 2}), "old-token", token)
			pairs := []string{auth.AuthorizationMD, "Bearer k1"}
			if tc.mark != "" {
				pairs = append(pairs, CountedMD, tc.mark)
			}
			var refused int
			for range 10 {
				if err := call(l, pairs...); status.Code(err) == codes.ResourceExhausted {
					refused++
				}
			}
			if tc.uncounted && refused != 0 || !tc.uncounted && refused != 8 {
				t.Fatalf("%d of 10 refused", refused)
			}
		})
	}
}
