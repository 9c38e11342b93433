package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"

	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/keystore"
	"github.com/deskgrid/deskgrid/services/platform/auth/ratelimit"
	"github.com/deskgrid/deskgrid/services/platform/config"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
)

// adminKeyFile holds the first admin key `deskgrid up` makes, readable by
// root only, so the CLI on the same machine finds it.
const adminKeyFile = "admin.key"

// authState is what an auth-enabled role shares: the key store, the verifier
// and the token services use to call each other.
type authState struct {
	keys     *keystore.Store
	verifier *auth.Verifier
	internal string
	// limiter is the per-key rate limit of this process's gRPC server and
	// gateway; nil without -rate-limit.
	limiter *ratelimit.Limiter
}

// authOn opens the key store and builds the verifier, once per process.
// Without -auth it returns nil: every call is let through as today.
func (s *setup) authOn(ctx context.Context) (*authState, error) {
	if !s.cfg.Auth {
		return nil, nil
	}
	if s.auth != nil {
		return s.auth, nil
	}
	token := s.cfg.InternalToken
	if token == "" {
		if s.role != "up" {
			return nil, errors.New("-internal-token is required with -auth outside deskgrid up (the same on every role)")
		}
		// One process: a token nobody else needs to know.
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		token = hex.EncodeToString(b)
	}
	dsn, err := s.storeDSN("auth.db")
	if err != nil {
		return nil, err
	}
	ks, err := keystore.Open(ctx, dsn, s.logger.With("component", "keystore"))
	if err != nil {
		return nil, fmt.Errorf("key store: %w", err)
	}
	s.closers.add("key store", func(context.Context) error { return ks.Close() })
	vc := auth.DefaultVerifierConfig()
	vc.InternalToken = token
	vc.CacheTTL = s.cfg.AuthCacheTTL
	s.auth = &authState{keys: ks, verifier: auth.NewVerifier(ks, vc, s.logger.With("component", "auth")), internal: token}
	if s.auth.limiter, err = s.rateLimiter(ctx, token); err != nil {
		return nil, err
	}
	return s.auth, nil
}

// rateLimiter is the per-key limit every surface of this process applies:
// counted in Redis in a cluster (so replicas share it), in memory for
// deskgrid up or a role without -redis-url.
func (s *setup) rateLimiter(ctx context.Context, internalToken string) (*ratelimit.Limiter, error) {
	if s.cfg.RateLimit <= 0 {
		return nil, nil
	}
	burst := max(1, int(2*s.cfg.RateLimit))
	var counter ratelimit.Counter
	if s.clustered() {
		rdb, err := s.redisClient(ctx)
		if err != nil {
			return nil, err
		}
		if counter, err = ratelimit.NewRedis(rdb, ratelimit.RedisConfig{Rate: s.cfg.RateLimit, Burst: burst, Prefix: s.cfg.RedisPrefix}); err != nil {
			return nil, err
		}
	} else {
		rc := ratelimit.DefaultConfig()
		rc.Rate, rc.Burst = s.cfg.RateLimit, burst
		counter = ratelimit.NewMemory(rc)
	}
	return ratelimit.New(ratelimit.Deps{Counter: counter, Logger: s.logger.With("component", "ratelimit"), InternalTokens: []string{internalToken}})
}

// serverOptions authenticate every call but health checks and reflection,
// then apply the per-key rate limit.
func (s *setup) serverOptions(ctx context.Context) ([]grpc.ServerOption, error) {
	a, err := s.authOn(ctx)
	if err != nil || a == nil {
		return nil, err
	}
	opts := auth.ServerOptions(a.verifier, nil)
	if a.limiter != nil {
		opts = append(opts, a.limiter.ServerOptions()...)
	}
	return opts, nil
}

// countedDialOption marks the calls the gateway relays for a request it has
// already counted, so the services behind it do not count them again.
func (s *setup) countedDialOption(ctx context.Context) ([]grpc.DialOption, error) {
	a, err := s.authOn(ctx)
	if err != nil || a == nil || a.limiter == nil {
		return nil, err
	}
	return []grpc.DialOption{grpc.WithPerRPCCredentials(ratelimit.CountedCredentials(a.internal))}, nil
}

// internalDial connects to another deskgrid service. With auth on, calls
// that carry no caller's key go as the system, acting for the tenant of the
// request they serve.
func (s *setup) internalDial(ctx context.Context, addr string) (*grpc.ClientConn, error) {
	opts, err := s.internalDialOptions(ctx)
	if err != nil {
		return nil, err
	}
	return dial(addr, opts...)
}

func (s *setup) internalDialOptions(ctx context.Context) ([]grpc.DialOption, error) {
	opts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcserver.MaxMessageBytes), grpc.MaxCallSendMsgSize(grpcserver.MaxMessageBytes))}
	a, err := s.authOn(ctx)
	if err != nil {
		return nil, err
	}
	if a != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.InternalCredentials(a.internal)))
	}
	counted, err := s.countedDialOption(ctx)
	return append(opts, counted...), err
}

// tenancy is the Deps.Tenancy of the services that own tenants' resources
// (session, agent, display, sandbox, images, history): auth.CallerOf with
// auth on, so a call with no principal is anonymous and never the system;
// nil (every caller unrestricted) without.
func (s *setup) tenancy() auth.Tenancy {
	if !s.cfg.Auth {
		return nil
	}
	return auth.CallerOf
}

// clientKey is the key client commands send: -api-key / DESKGRID_API_KEY, or
// else the admin key `deskgrid up` left in its data dir (DESKGRID_DATA_DIR or
// the default), if readable.
func clientKey(flagKey string) string {
	if flagKey != "" {
		return flagKey
	}
	b, err := os.ReadFile(clientKeyFile())
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// clientKeyFile is the admin key file a client command reads when given no
// key: in DESKGRID_DATA_DIR, else in the default data dir.
func clientKeyFile() string {
	dir := os.Getenv(config.EnvName("data-dir"))
	if dir == "" {
		dir = defaultDataDir()
	}
	return filepath.Join(dir, adminKeyFile)
}

// keySources says where a client command takes its API key from, for a
// refusal of the key it sent or of none.
func keySources() string {
	return fmt.Sprintf("the command sends -api-key, else %s, else the key in %s (%s names another data dir)", config.EnvName("api-key"), clientKeyFile(), config.EnvName("data-dir"))
}
