package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/authtest"
)

// target names what an attack aims at: a session, a run on it and the
// secret id of the input lease held on it.
type target struct{ session, run, lease string }

type agentCall func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error

// targetCalls make each RPC against a target.
var targetCalls = map[string]agentCall{
	"CreateRun": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		_, err := c.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: tg.session, Prompt: "x"})
		return err
	},
	"GetRun": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		_, err := c.GetRun(ctx, &agentv1.GetRunRequest{RunId: tg.run})
		return err
	},
	"ListRuns": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		resp, err := c.ListRuns(ctx, &agentv1.ListRunsRequest{SessionId: tg.session})
		if err == nil && len(resp.GetRuns()) > 0 {
			return fmt.Errorf("listed %d runs", len(resp.GetRuns()))
		}
		return err
	},
	"CancelRun": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		_, err := c.CancelRun(ctx, &agentv1.CancelRunRequest{RunId: tg.run})
		return err
	},
	"StreamRunEvents": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		st, err := c.StreamRunEvents(ctx, &agentv1.StreamRunEventsRequest{RunId: tg.run})
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	},
	"SendMessage": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		_, err := c.SendMessage(ctx, &agentv1.SendMessageRequest{RunId: tg.run, Text: "hi"})
		return err
	},
	"ApproveStep": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		_, err := c.ApproveStep(ctx, &agentv1.ApproveStepRequest{RunId: tg.run})
		return err
	},
	"RejectStep": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		_, err := c.RejectStep(ctx, &agentv1.RejectStepRequest{RunId: tg.run})
		return err
	},
	"AcquireInputLease": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		_, err := c.AcquireInputLease(ctx, &agentv1.AcquireInputLeaseRequest{SessionId: tg.session, Holder: "attacker", Ttl: durationMs(3_600_000), Wait: durationMs(200)})
		return err
	},
	"GetInputLease": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		_, err := c.GetInputLease(ctx, &agentv1.GetInputLeaseRequest{SessionId: tg.session})
		return err
	},
	"RenewInputLease": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		_, err := c.RenewInputLease(ctx, &agentv1.RenewInputLeaseRequest{SessionId: tg.session, LeaseId: tg.lease, Ttl: durationMs(3_600_000)})
		return err
	},
	"ReleaseInputLease": func(ctx context.Context, c agentv1.AgentServiceClient, tg target) error {
		_, err := c.ReleaseInputLease(ctx, &agentv1.ReleaseInputLeaseRequest{SessionId: tg.session, LeaseId: tg.lease})
		return err
	},
}

// answersWithoutNotFound are the calls whose answer for something the
// caller does not own is not NotFound: a list finds nothing.
var answersWithoutNotFound = []string{"ListRuns"}

// Every RPC must be checked for ownership: one added to the service without
// an entry here fails.
func TestTenancyCoversEveryRPC(t *testing.T) {
	authtest.RequireCases(t, agentv1.AgentService_ServiceDesc, slices.Collect(maps.Keys(targetCalls)))
}

func answer(err error, tg target) (codes.Code, string) {
	return authtest.Answer(err, tg.session, tg.run, tg.lease)
}

// Another tenant can neither see nor touch a tenant's runs and input lease,
// even knowing their names and the lease's secret id, and learns nothing it
// would not learn of a session that does not exist: every call answers as
// for a missing one.
func TestAnotherTenantCannotReachRunsOrLeases(t *testing.T) {
	sessions := startSessions(t, &fakeSessions{owner: map[string]string{"s-1": "acme"}})
	p := &scripted{turns: []func(provider.Request) (*provider.Response, error){toolTurn(call("t1", "bash", `{"command":"ls"}`))}}
	h := newHarness(t, DefaultConfig(), fixed(p), func(d *Deps) { d.Sessions = sessionv1.NewSessionServiceClient(sessions) })
	victim := asTenant("acme")
	resp, err := h.client.CreateRun(victim, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x",
		Options: &agentv1.RunOptions{ApprovalTools: []string{"bash"}, SkipInputLease: true}})
	if err != nil {
		t.Fatal(err)
	}
	runID := resp.GetRun().GetId()
	waitStateAs(t, h.client, victim, runID, agentv1.RunState_RUN_STATE_WAITING_APPROVAL)
	held, err := h.client.AcquireInputLease(victim, &agentv1.AcquireInputLeaseRequest{SessionId: "s-1", Holder: "victim", Ttl: durationMs(60_000)})
	if err != nil {
		t.Fatal(err)
	}
	lease := held.GetLease()
	if len(lease.GetLeaseId()) != 32 {
		t.Fatalf("lease id %q is not 128 random bits", lease.GetLeaseId())
	}

	own := target{session: "s-1", run: runID, lease: lease.GetLeaseId()}
	missing := target{session: "s-missing", run: "run-missing", lease: lease.GetLeaseId()}
	attacker := asTenant("globex")
	for name, c := range targetCalls {
		errOwn := c(attacker, h.client, own)
		errMissing := c(attacker, h.client, missing)
		if slices.Contains(answersWithoutNotFound, name) {
			if errOwn != nil || errMissing != nil {
				t.Errorf("%s: on the victim's %v, on nothing %v", name, errOwn, errMissing)
			}
			continue
		}
		if status.Code(errOwn) != codes.NotFound {
			t.Errorf("%s on another tenant's session: %v, want NotFound", name, errOwn)
			continue
		}
		co, mo := answer(errOwn, own)
		cm, mm := answer(errMissing, missing)
		if co != cm || mo != mm {
			t.Errorf("%s tells a victim's target (%v %q) from a missing one (%v %q)", name, co, mo, cm, mm)
		}
	}
	// The owner too gets NotFound for a session that does not exist.
	for _, name := range []string{"CreateRun", "AcquireInputLease", "GetInputLease", "RenewInputLease", "ReleaseInputLease"} {
		if err := targetCalls[name](victim, h.client, missing); status.Code(err) != codes.NotFound {
			t.Errorf("%s on a missing session: %v, want NotFound", name, err)
		}
	}

	// Nothing moved: the victim still holds the lease and its run waits.
	renewed, err := h.client.RenewInputLease(victim, &agentv1.RenewInputLeaseRequest{SessionId: "s-1", LeaseId: lease.GetLeaseId()})
	if err != nil || renewed.GetLease().GetToken() != lease.GetToken() || renewed.GetLease().GetHolder() != "victim" {
		t.Fatalf("the victim's lease after the attack: %v, %v", renewed, err)
	}
	if r := waitStateAs(t, h.client, victim, runID, agentv1.RunState_RUN_STATE_WAITING_APPROVAL); len(r.GetPendingToolCall().GetId()) == 0 {
		t.Fatalf("the victim's run after the attack: %v", r)
	}
	// The token the display sees is not the credential: knowing it and the
	// holder's name releases nothing.
	if _, err := h.client.ReleaseInputLease(victim, &agentv1.ReleaseInputLeaseRequest{SessionId: "s-1", Holder: "victim", Token: lease.GetToken()}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("release by holder and token: %v", err)
	}
	if _, err := h.client.ReleaseInputLease(victim, &agentv1.ReleaseInputLeaseRequest{SessionId: "s-1", LeaseId: lease.GetLeaseId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.CancelRun(victim, &agentv1.CancelRunRequest{RunId: runID}); err != nil {
		t.Fatal(err)
	}
}

// waitStateAs polls GetRun as a tenant until the run is in state.
func waitStateAs(t *testing.T, c agentv1.AgentServiceClient, ctx context.Context, id string, state agentv1.RunState) *agentv1.Run {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := c.GetRun(ctx, &agentv1.GetRunRequest{RunId: id})
		if err == nil && r.GetRun().GetState() == state {
			return r.GetRun()
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %v, %v; want %v", id, r, err, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// With auth on, a call that reaches the service with no principal (past
// the interceptors, as an in-process caller could) is anonymous, not the
// system: it finds no run, not even one made for no tenant, touches no
// session's input lease, lists nothing and may start no run.
func TestTenancyAnonymousIsNotTheSystem(t *testing.T) {
	p := &scripted{turns: []func(provider.Request) (*provider.Response, error){toolTurn(call("t1", "bash", `{"command":"ls"}`))}}
	h := newHarness(t, DefaultConfig(), fixed(p), func(d *Deps) { d.Tenancy = auth.CallerOf })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	system := auth.AsSystem(ctx)
	created, err := h.svc.CreateRun(system, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x",
		Options: &agentv1.RunOptions{ApprovalTools: []string{"bash"}, SkipInputLease: true}})
	if err != nil {
		t.Fatal(err)
	}
	run := created.GetRun()
	if run.GetTenant() != "" {
		t.Fatalf("the system's run belongs to %q, want no tenant", run.GetTenant())
	}
	held, err := h.svc.AcquireInputLease(system, &agentv1.AcquireInputLeaseRequest{SessionId: "s-1", Holder: "system", Ttl: durationMs(60_000)})
	if err != nil {
		t.Fatal(err)
	}

	anon := ctx // the harness's server has no interceptors: no principal
	tg := target{session: "s-1", run: run.GetId(), lease: held.GetLease().GetLeaseId()}
	for name, c := range targetCalls {
		want := codes.NotFound
		if name == "CreateRun" || name == "ListRuns" {
			want = codes.Unauthenticated
		}
		if err := c(anon, h.client, tg); status.Code(err) != want {
			t.Errorf("anonymous %s: %v, want %v", name, err, want)
		}
	}

	// Nothing moved, and the system still has its run and its lease.
	got, err := h.svc.GetRun(system, &agentv1.GetRunRequest{RunId: run.GetId()})
	if err != nil || terminal(got.GetRun().GetState()) {
		t.Fatalf("the system's run after the anonymous calls: %v, %v", got.GetRun(), err)
	}
	if _, err := h.svc.RenewInputLease(system, &agentv1.RenewInputLeaseRequest{SessionId: "s-1", LeaseId: held.GetLease().GetLeaseId()}); err != nil {
		t.Fatalf("the system lost its lease: %v", err)
	}
	if _, err := h.svc.CancelRun(system, &agentv1.CancelRunRequest{RunId: run.GetId()}); err != nil {
		t.Fatal(err)
	}
}
