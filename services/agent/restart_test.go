package agent

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/agent/internal/storetest"
	"github.com/deskgrid/deskgrid/services/agent/store"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/authtest"
	"github.com/deskgrid/deskgrid/services/platform/auth/secretbox"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
)

// keyRecorder hands out scripted providers and remembers the keys given.
type keyRecorder struct {
	mu   sync.Mutex
	keys []string
	p    *scripted
}

func (k *keyRecorder) newProvider(_ context.Context, cfg provider.Config) (provider.Provider, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = append(k.keys, cfg.APIKey)
	return k.p, nil
}

func (k *keyRecorder) last() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[len(k.keys)-1]
}

// A run continues after the service restarts: its record, conversation and
// (sealed) key come back from the SQL store. The sealing keys rotate: a
// key sealed before the rotation still opens while its key stays
// configured behind the new one. Without a sealing key, or when the key
// that sealed it is gone, the caller is asked for the key again. The key is
// never stored in clear.
func TestSendMessageAfterRestart(t *testing.T) {
	const key = "sk-own-run-key-5f1e2d3c4b5a"
	oldKey := secretbox.Key{ID: "2026-01", Secret: bytes.Repeat([]byte{42}, 32)}
	newKey := secretbox.Key{ID: "2026-11", Secret: bytes.Repeat([]byte{7}, 32)}
	box := func(keys ...secretbox.Key) *secretbox.Box {
		b, err := secretbox.New(keys...)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Each mode: the sealing keys before and after the restart.
	modes := map[string][2][]secretbox.Key{
		"plain-memory": {nil, nil},
		"sealed":       {{oldKey}, {oldKey}},
		"rotated":      {{oldKey}, {newKey, oldKey}},
		"key-gone":     {{oldKey}, {newKey}},
	}
	for _, db := range []string{"sqlite", "postgres"} {
		for mode, keys := range modes {
			sealed := mode == "sealed" || mode == "rotated"
			t.Run(db+"/"+mode, func(t *testing.T) {
				ctx := context.Background()
				var dsn string
				if db == "sqlite" {
					dsn = filepath.Join(t.TempDir(), "agent.db")
				} else {
					dsn = storetest.PostgresSchema(t)
				}
				open := func() *store.SQL {
					st, err := store.Open(ctx, dsn, nil)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = st.Close() })
					return st
				}
				cfg := DefaultConfig()
				if keys[0] != nil {
					cfg.Sealer = box(keys[0]...)
				}
				kr := &keyRecorder{p: &scripted{}}
				h1 := newHarness(t, cfg, kr.newProvider, func(d *Deps) { d.Store = open() })
				resp, err := h1.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "first", ApiKey: key})
				if err != nil {
					t.Fatal(err)
				}
				id := resp.GetRun().GetId()
				done := waitState(t, h1.client, id, agentv1.RunState_RUN_STATE_SUCCEEDED)
				if done.GetEventSequence() == 0 {
					t.Fatalf("run = %v", done)
				}
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := h1.svc.Close(cctx); err != nil {
					t.Fatal(err)
				}

				cfg.Sealer = nil
				if keys[1] != nil {
					cfg.Sealer = box(keys[1]...)
				}
				kr2 := &keyRecorder{p: &scripted{}}
				h2 := newHarness(t, cfg, kr2.newProvider, func(d *Deps) { d.Store = open() })
				got, err := h2.client.GetRun(ctx, &agentv1.GetRunRequest{RunId: id})
				if err != nil || got.GetRun().GetState() != agentv1.RunState_RUN_STATE_SUCCEEDED || got.GetRun().GetEventSequence() != done.GetEventSequence() {
					t.Fatalf("after restart: %v, %v", got, err)
				}
				_, err = h2.client.SendMessage(ctx, &agentv1.SendMessageRequest{RunId: id, Text: "second"})
				if !sealed {
					if status.Code(err) != codes.FailedPrecondition {
						t.Fatalf("without a kept key: %v", err)
					}
					assertNoSecret(t, key, "error", err.Error())
					_, err = h2.client.SendMessage(ctx, &agentv1.SendMessageRequest{RunId: id, Text: "second", ApiKey: key})
				}
				if err != nil {
					t.Fatal(err)
				}
				waitState(t, h2.client, id, agentv1.RunState_RUN_STATE_SUCCEEDED)
				if kr2.last() != key {
					t.Fatalf("continued with key %q", kr2.last())
				}
				kr2.p.mu.Lock()
				msgs := kr2.p.reqs[0].Messages
				kr2.p.mu.Unlock()
				if len(msgs) != 3 || msgs[0].Text() != "first" || msgs[1].Text() != "done" || msgs[2].Text() != "second" {
					t.Fatalf("conversation = %+v", msgs)
				}
				evs := collect(t, h2.client, id, done.GetEventSequence())
				if len(evs) == 0 || evs[0].GetSequence() != done.GetEventSequence()+1 || evs[0].GetUserMessage() != "second" {
					t.Fatalf("continued events = %v", evs)
				}

				// Nothing the store wrote holds the key in clear.
				if db == "sqlite" {
					files, _ := filepath.Glob(dsn + "*")
					for _, f := range files {
						b, _ := os.ReadFile(f)
						if bytes.Contains(b, []byte(key)) {
							t.Fatalf("%s holds the key in clear", f)
						}
					}
				} else {
					conn, err := sql.Open("pgx", dsn)
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Close()
					var n int
					if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM agent_runs WHERE position($1::bytea in coalesce(sealed_key, ''::bytea) || data || coalesce(conversation, ''::bytea)) > 0`, []byte(key)).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if n != 0 {
						t.Fatal("the key is stored in clear")
					}
				}
			})
		}
	}
}

// tenantFromMetadata is the tests' Tenancy: the tenant a test puts in the
// call's metadata, standing in for the authenticated principal, and
// DefaultTenant for a call without it.
func tenantFromMetadata(ctx context.Context) auth.Caller {
	if t := authtest.Tenant(ctx); t != "" {
		return auth.ForTenant(t)
	}
	return auth.ForTenant(DefaultTenant)
}

func asTenant(t string) context.Context {
	return authtest.As(context.Background(), t)
}

func TestRunsBelongToTheirTenant(t *testing.T) {
	p := &scripted{turns: []func(provider.Request) (*provider.Response, error){toolTurn(call("t1", "bash", `{"command":"ls"}`))}}
	h := newHarness(t, DefaultConfig(), fixed(p), func(d *Deps) { d.Tenancy = tenantFromMetadata })
	resp, err := h.client.CreateRun(asTenant("acme"), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", Options: &agentv1.RunOptions{ApprovalTools: []string{"bash"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetId()
	if resp.GetRun().GetTenant() != "acme" {
		t.Fatalf("tenant = %q", resp.GetRun().GetTenant())
	}
	r, err := h.client.GetRun(asTenant("acme"), &agentv1.GetRunRequest{RunId: id})
	if err != nil || r.GetRun().GetTenant() != "acme" {
		t.Fatalf("own tenant: %v, %v", r, err)
	}
	waitStateAs := func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := h.client.GetRun(asTenant("acme"), &agentv1.GetRunRequest{RunId: id})
			if err == nil && r.GetRun().GetState() == agentv1.RunState_RUN_STATE_WAITING_APPROVAL {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("run never waited for approval: %v, %v", r, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitStateAs()
	other := asTenant("globex")
	calls := map[string]func() error{
		"get":    func() error { _, err := h.client.GetRun(other, &agentv1.GetRunRequest{RunId: id}); return err },
		"cancel": func() error { _, err := h.client.CancelRun(other, &agentv1.CancelRunRequest{RunId: id}); return err },
		"approve": func() error {
			_, err := h.client.ApproveStep(other, &agentv1.ApproveStepRequest{RunId: id})
			return err
		},
		"reject": func() error { _, err := h.client.RejectStep(other, &agentv1.RejectStepRequest{RunId: id}); return err },
		"send": func() error {
			_, err := h.client.SendMessage(other, &agentv1.SendMessageRequest{RunId: id, Text: "hi"})
			return err
		},
		"stream": func() error {
			st, err := h.client.StreamRunEvents(other, &agentv1.StreamRunEventsRequest{RunId: id})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
	}
	for name, c := range calls {
		if err := c(); status.Code(err) != codes.NotFound {
			t.Errorf("%s as another tenant: %v", name, err)
		}
	}
	l, err := h.client.ListRuns(other, &agentv1.ListRunsRequest{SessionId: "s-1"})
	if err != nil || len(l.GetRuns()) != 0 {
		t.Fatalf("another tenant lists %v, %v", l, err)
	}
	l, err = h.client.ListRuns(asTenant("acme"), &agentv1.ListRunsRequest{SessionId: "s-1"})
	if err != nil || len(l.GetRuns()) != 1 {
		t.Fatalf("own tenant lists %v, %v", l, err)
	}
	if _, err := h.client.CancelRun(asTenant("acme"), &agentv1.CancelRunRequest{RunId: id}); err != nil {
		t.Fatal(err)
	}
}

// fakeSessions owns sessions per tenant, read from the call's metadata as
// the session service would; without owners every session is the caller's.
type fakeSessions struct {
	sessionv1.UnimplementedSessionServiceServer
	owner map[string]string
	// state of each session; RUNNING when not given.
	mu    sync.Mutex
	state map[string]sessionv1.SessionState
}

func (f *fakeSessions) set(id string, st sessionv1.SessionState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == nil {
		f.state = map[string]sessionv1.SessionState{}
	}
	f.state[id] = st
}

func (f *fakeSessions) GetSession(ctx context.Context, req *sessionv1.GetSessionRequest) (*sessionv1.GetSessionResponse, error) {
	if owner, ok := f.owner[req.GetSessionId()]; f.owner != nil && (!ok || !tenantFromMetadata(ctx).Sees(owner)) {
		return nil, status.Errorf(codes.NotFound, "session %s not found", req.GetSessionId())
	}
	f.mu.Lock()
	st, ok := f.state[req.GetSessionId()]
	f.mu.Unlock()
	if !ok {
		st = sessionv1.SessionState_SESSION_STATE_RUNNING
	}
	return &sessionv1.GetSessionResponse{Session: &sessionv1.Session{Id: req.GetSessionId(), State: st}}, nil
}

// A run starts only on a session the caller owns.
func TestCreateRunChecksTheSessionIsTheCallers(t *testing.T) {
	srv := grpcservertest.Start(t, func(r grpc.ServiceRegistrar) {
		sessionv1.RegisterSessionServiceServer(r, &fakeSessions{owner: map[string]string{"s-1": "acme"}})
	}, grpcservertest.Options{})
	conn := srv.Dial(t)
	h := newHarness(t, DefaultConfig(), fixed(&scripted{}), func(d *Deps) {
		d.Tenancy = tenantFromMetadata
		d.Sessions = sessionv1.NewSessionServiceClient(conn)
	})
	if _, err := h.client.CreateRun(asTenant("globex"), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x"}); status.Code(err) != codes.NotFound {
		t.Fatalf("on another tenant's session: %v", err)
	}
	if _, err := h.client.CreateRun(asTenant("acme"), &agentv1.CreateRunRequest{SessionId: "s-2", Prompt: "x"}); status.Code(err) != codes.NotFound {
		t.Fatalf("on a missing session: %v", err)
	}
	resp, err := h.client.CreateRun(asTenant("acme"), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if _, err := h.client.CreateRun(asTenant("acme"), &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("without the session service: %v", err)
	}
	_ = resp
}

// Runs a crashed process left unfinished are recorded as interrupted when
// the service starts again.
func TestInterruptedRunsAreRecoveredAtStart(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	now := timestamppb.Now()
	for _, r := range []*agentv1.Run{
		{Id: "run-crashed", Tenant: DefaultTenant, SessionId: "s-1", State: agentv1.RunState_RUN_STATE_RUNNING, CreateTime: now, UpdateTime: now},
		{Id: "run-done", Tenant: DefaultTenant, SessionId: "s-1", State: agentv1.RunState_RUN_STATE_SUCCEEDED, CreateTime: now, UpdateTime: now},
	} {
		if err := st.Create(ctx, r, store.Access{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.RecoverInterruptedRuns = true
	h := newHarness(t, cfg, fixed(&scripted{}), func(d *Deps) { d.Store = st })
	r, err := h.client.GetRun(ctx, &agentv1.GetRunRequest{RunId: "run-crashed"})
	if err != nil || r.GetRun().GetState() != agentv1.RunState_RUN_STATE_FAILED || !contains(r.GetRun().GetStateReason(), "interrupted") {
		t.Fatalf("crashed run = %v, %v", r, err)
	}
	r, err = h.client.GetRun(ctx, &agentv1.GetRunRequest{RunId: "run-done"})
	if err != nil || r.GetRun().GetState() != agentv1.RunState_RUN_STATE_SUCCEEDED {
		t.Fatalf("finished run = %v, %v", r, err)
	}
	// It can still be continued.
	if _, err := h.client.SendMessage(ctx, &agentv1.SendMessageRequest{RunId: "run-crashed", Text: "go on"}); err != nil {
		t.Fatal(err)
	}
	waitState(t, h.client, "run-crashed", agentv1.RunState_RUN_STATE_SUCCEEDED)
}
