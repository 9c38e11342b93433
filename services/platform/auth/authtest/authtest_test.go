package authtest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/authtest"
)

// incoming is what a server handler sees of a client's outgoing ctx.
func incoming(out context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(out)
	return metadata.NewIncomingContext(context.Background(), md)
}

// Each kind of caller is what its name says under each Tenancy.
func TestCallers(t *testing.T) {
	bg := context.Background()
	for _, tc := range []struct {
		name    string
		tenancy auth.Tenancy
		ctx     context.Context
		want    auth.Caller
	}{
		{"tenant A", authtest.Tenancy, incoming(authtest.As(bg, authtest.Victim)), auth.ForTenant(authtest.Victim)},
		{"tenant B", authtest.Tenancy, authtest.Incoming(bg, authtest.Attacker), auth.ForTenant(authtest.Attacker)},
		{"no tenant named", authtest.Tenancy, bg, auth.System},
		{"auth on, no principal", authtest.AuthOn, authtest.Incoming(bg, authtest.Victim), auth.Caller{Kind: auth.Anonymous}},
		{"auth on, the system", authtest.AuthOn, auth.AsSystem(bg), auth.System},
		{"auth off", authtest.AuthOff, authtest.Incoming(bg, authtest.Attacker), auth.Unrestricted},
	} {
		if got := tc.tenancy.Caller(tc.ctx); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if authtest.Victim == authtest.Attacker {
		t.Fatal("the two tenants are one")
	}
}

// recorder is a testing.TB that records what Errorf reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestRequireCasesNamesTheRPCWithoutOne(t *testing.T) {
	all := authtest.Methods(agentv1.AgentService_ServiceDesc)
	if !slices.Contains(all, "CreateRun") || !slices.Contains(all, "StreamRunEvents") {
		t.Fatalf("methods %v miss a unary or a streaming RPC", all)
	}
	r := &recorder{}
	authtest.RequireCases(r, agentv1.AgentService_ServiceDesc, all[:1], all[2:])
	want := fmt.Sprintf("deskgrid.agent.v1.AgentService.%s has no tenancy case", all[1])
	if len(r.errs) != 1 || r.errs[0] != want {
		t.Fatalf("reported %q, want %q", r.errs, want)
	}
	r = &recorder{}
	authtest.RequireCases(r, agentv1.AgentService_ServiceDesc, all)
	if len(r.errs) != 0 {
		t.Fatalf("reported %q with every RPC covered", r.errs)
	}
}

func TestNamesPutsTheLastOnesLast(t *testing.T) {
	got := authtest.Names(map[string]int{"Delete": 0, "Get": 0, "Abort": 0, "List": 0}, "Delete", "Abort")
	if want := []string{"Get", "List", "Delete", "Abort"}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

func TestAnswerTakesTheNamesOut(t *testing.T) {
	a, am := authtest.Answer(status.Error(codes.NotFound, "run r-1 of session s-1 not found"), "s-1", "r-1", "")
	b, bm := authtest.Answer(status.Error(codes.NotFound, "run r-2 of session s-2 not found"), "s-2", "r-2", "")
	if a != codes.NotFound || a != b || am != bm {
		t.Fatalf("%v %q and %v %q differ", a, am, b, bm)
	}
}
