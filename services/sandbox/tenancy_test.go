package sandbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/authtest"
)

func asTenant(t testing.TB, tenant string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return authtest.As(ctx, tenant)
}

// target names what an attack aims at: a session, one of its snapshots and
// one of its processes.
type target struct{ session, snapshot, process string }

type sandboxCall func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error

// sessionCalls make each RPC that names a session (and, where it takes
// them, a snapshot or process) against a target.
var sessionCalls = map[string]sandboxCall{
	"GetSandbox": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SessionId: tg.session})
		return err
	},
	"Exec": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		st, err := c.Exec(ctx, &sandboxv1.ExecRequest{SessionId: tg.session, Argv: []string{"sh", "-c", "echo pwned > pwned.txt"}})
		if err != nil {
			return err
		}
		return authtest.Drain(st.Recv)
	},
	"ReadFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: tg.session, Path: "secret.txt"})
		return err
	},
	"WriteFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: tg.session, Path: "secret.txt", Content: []byte("pwned")})
		return err
	},
	"ListFiles": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SessionId: tg.session, Path: "."})
		return err
	},
	"StatFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.StatFile(ctx, &sandboxv1.StatFileRequest{SessionId: tg.session, Path: "secret.txt"})
		return err
	},
	"MakeDirectory": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SessionId: tg.session, Path: "pwned-dir"})
		return err
	},
	"MoveFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.MoveFile(ctx, &sandboxv1.MoveFileRequest{SessionId: tg.session, FromPath: "secret.txt", ToPath: "moved.txt"})
		return err
	},
	"DeleteFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.DeleteFile(ctx, &sandboxv1.DeleteFileRequest{SessionId: tg.session, Path: "secret.txt"})
		return err
	},
	"UploadFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		st, err := c.UploadFile(ctx)
		if err != nil {
			return err
		}
		_ = st.Send(&sandboxv1.UploadFileRequest{Data: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SessionId: tg.session, Path: "secret.txt"}}})
		_ = st.Send(&sandboxv1.UploadFileRequest{Data: &sandboxv1.UploadFileRequest_Chunk{Chunk: []byte("pwned")}})
		_, err = st.CloseAndRecv()
		return err
	},
	"DownloadFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		st, err := c.DownloadFile(ctx, &sandboxv1.DownloadFileRequest{SessionId: tg.session, Path: "secret.txt"})
		if err != nil {
			return err
		}
		return authtest.Drain(st.Recv)
	},
	"StartProcess": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: tg.session, Argv: []string{"sleep", "1000"}})
		return err
	},
	"StopProcess": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.StopProcess(ctx, &sandboxv1.StopProcessRequest{SessionId: tg.session, ProcessId: tg.process})
		return err
	},
	"ListProcesses": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.ListProcesses(ctx, &sandboxv1.ListProcessesRequest{SessionId: tg.session})
		return err
	},
	"GetAccessibilityTree": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.GetAccessibilityTree(ctx, &sandboxv1.GetAccessibilityTreeRequest{SessionId: tg.session})
		return err
	},
	"ActOnAccessible": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.ActOnAccessible(ctx, &sandboxv1.ActOnAccessibleRequest{SessionId: tg.session, Id: ":1.1:/org/a11y/atspi/accessible/root", Operation: &sandboxv1.ActOnAccessibleRequest_Focus{Focus: true}})
		return err
	},
	"ListApplications": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.ListApplications(ctx, &sandboxv1.ListApplicationsRequest{SessionId: tg.session})
		return err
	},
	"LaunchApplication": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.LaunchApplication(ctx, &sandboxv1.LaunchApplicationRequest{SessionId: tg.session, Application: "sh"})
		return err
	},
	"Open": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.Open(ctx, &sandboxv1.OpenRequest{SessionId: tg.session, Target: "a.txt"})
		return err
	},
	"CommitSandbox": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.CommitSandbox(ctx, &sandboxv1.CommitSandboxRequest{SessionId: tg.session, Image: "team/snap:v1"})
		return err
	},
	"FreezeSandbox": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.FreezeSandbox(ctx, &sandboxv1.FreezeSandboxRequest{SessionId: tg.session})
		return err
	},
	"ThawSandbox": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.ThawSandbox(ctx, &sandboxv1.ThawSandboxRequest{SessionId: tg.session})
		return err
	},
	"ListChanges": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: tg.session})
		return err
	},
	"DiffFile": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.DiffFile(ctx, &sandboxv1.DiffFileRequest{SessionId: tg.session, Path: "secret.txt"})
		return err
	},
	"ApplyChanges": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.ApplyChanges(ctx, &sandboxv1.ApplyChangesRequest{SessionId: tg.session})
		return err
	},
	"DiscardChanges": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.DiscardChanges(ctx, &sandboxv1.DiscardChangesRequest{SessionId: tg.session})
		return err
	},
	"CreateSnapshot": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SessionId: tg.session})
		return err
	},
	"ListSnapshots": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		resp, err := c.ListSnapshots(ctx, &sandboxv1.ListSnapshotsRequest{SessionId: tg.session})
		if err == nil && len(resp.GetSnapshots()) > 0 {
			return fmt.Errorf("listed %d snapshots", len(resp.GetSnapshots()))
		}
		return err
	},
	"RestoreSnapshot": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.RestoreSnapshot(ctx, &sandboxv1.RestoreSnapshotRequest{SessionId: tg.session, SnapshotId: tg.snapshot})
		return err
	},
	"DeleteSnapshot": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.DeleteSnapshot(ctx, &sandboxv1.DeleteSnapshotRequest{SessionId: tg.session, SnapshotId: tg.snapshot})
		return err
	},
	"RunShell": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.RunShell(ctx, &sandboxv1.RunShellRequest{SessionId: tg.session, Command: "echo pwned > pwned.txt", Timeout: durationpb.New(10 * time.Second)})
		return err
	},
	"RestartShell": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.RestartShell(ctx, &sandboxv1.RestartShellRequest{SessionId: tg.session})
		return err
	},
	"DeleteSandbox": func(ctx context.Context, c sandboxv1.SandboxServiceClient, tg target) error {
		_, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: tg.session})
		return err
	},
}

// answersWithoutNotFound are the calls whose answer for a session that does
// not exist is not NotFound (deleting nothing succeeds; a session without
// snapshots lists none); another tenant's session gets that same answer.
var answersWithoutNotFound = []string{"DeleteSandbox", "ListSnapshots"}

// tenantWideCalls name no existing session of another tenant, or list
// across sessions; the test checks them on their own.
var tenantWideCalls = []string{"CreateSandbox", "ListSandboxes"}

// Every RPC must be checked for ownership: one added to the service without
// an entry here fails.
func TestTenancyCoversEveryRPC(t *testing.T) {
	authtest.RequireCases(t, sandboxv1.SandboxService_ServiceDesc, slices.Collect(maps.Keys(sessionCalls)), tenantWideCalls)
}

// answer is a call's outcome with the target's names taken out, so the
// answers for two targets compare.
func answer(err error, tg target) (codes.Code, string) {
	return authtest.Answer(err, tg.session, tg.snapshot, tg.process)
}

// An attacker tenant gets, for the victim's sandbox, snapshot and process,
// exactly the answer it gets for ones that do not exist; it sees nothing
// of them in lists, and the victim is unaffected.
func TestTenancyIsolatesSandboxes(t *testing.T) {
	cfg := testConfig(t)
	scrubOnCleanup(t, cfg.Root)
	h := newHarness(t, cfg, Deps{Tenancy: authtest.Tenancy})
	c := h.client
	victim, attacker := asTenant(t, authtest.Victim), asTenant(t, authtest.Attacker)

	for _, x := range []struct {
		ctx context.Context
		id  string
	}{{victim, "victim-sess"}, {attacker, "attacker-sess"}} {
		if _, err := c.CreateSandbox(x.ctx, &sandboxv1.CreateSandboxRequest{SessionId: x.id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WriteFile(victim, &sandboxv1.WriteFileRequest{SessionId: "victim-sess", Path: "secret.txt", Content: []byte("victim's")}); err != nil {
		t.Fatal(err)
	}
	snap, err := c.CreateSnapshot(victim, &sandboxv1.CreateSnapshotRequest{SessionId: "victim-sess"})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := c.StartProcess(victim, &sandboxv1.StartProcessRequest{SessionId: "victim-sess", Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	own, err := c.CreateSnapshot(attacker, &sandboxv1.CreateSnapshotRequest{SessionId: "attacker-sess"})
	if err != nil {
		t.Fatal(err)
	}

	victimTarget := target{"victim-sess", snap.GetSnapshot().GetSnapshotId(), proc.GetProcess().GetProcessId()}
	unknown := target{"no-such-sess", "snap-000000000000000000000000", proc.GetProcess().GetProcessId()}

	victimIntact := func(t *testing.T, after string) {
		t.Helper()
		got, err := c.ReadFile(victim, &sandboxv1.ReadFileRequest{SessionId: "victim-sess", Path: "secret.txt"})
		if err != nil || string(got.GetContent()) != "victim's" {
			t.Fatalf("victim's file after %s: %q %v", after, got.GetContent(), err)
		}
		sb, err := c.GetSandbox(victim, &sandboxv1.GetSandboxRequest{SessionId: "victim-sess"})
		if err != nil || sb.GetSandbox().GetFrozen() {
			t.Fatalf("victim's sandbox after %s: %v %v", after, sb, err)
		}
		ps, err := c.ListProcesses(victim, &sandboxv1.ListProcessesRequest{SessionId: "victim-sess"})
		if err != nil || len(ps.GetProcesses()) != 1 || ps.GetProcesses()[0].GetState() != sandboxv1.ProcessState_PROCESS_STATE_RUNNING {
			t.Fatalf("victim's processes after %s: %v %v", after, ps, err)
		}
		ch, err := c.ListChanges(victim, &sandboxv1.ListChangesRequest{SessionId: "victim-sess"})
		if err != nil || len(ch.GetChanges()) != 1 {
			t.Fatalf("victim's changes after %s: %v %v", after, ch, err)
		}
		sn, err := c.ListSnapshots(victim, &sandboxv1.ListSnapshotsRequest{SessionId: "victim-sess"})
		if err != nil || len(sn.GetSnapshots()) != 1 {
			t.Fatalf("victim's snapshots after %s: %v %v", after, sn, err)
		}
	}

	// Deletes last, so every other call meets what still exists.
	for _, name := range authtest.Names(sessionCalls, "DeleteSnapshot", "DeleteSandbox") {
		call := sessionCalls[name]
		t.Run(name, func(t *testing.T) {
			gc, gm := answer(call(attacker, c, victimTarget), victimTarget)
			uc, um := answer(call(attacker, c, unknown), unknown)
			if gc != uc || gm != um {
				t.Fatalf("another tenant's session answers %v %q, an unknown one %v %q", gc, gm, uc, um)
			}
			if !slices.Contains(answersWithoutNotFound, name) && gc != codes.NotFound {
				t.Fatalf("another tenant's session: %v %q, want NotFound", gc, gm)
			}
			victimIntact(t, name)
		})
	}

	t.Run("ListSandboxes", func(t *testing.T) {
		for _, tc := range []struct {
			ctx  context.Context
			want []string
		}{
			{attacker, []string{"attacker-sess"}},
			{victim, []string{"victim-sess"}},
			{context.Background(), []string{"attacker-sess", "victim-sess"}}, // a system call for no tenant
		} {
			resp, err := c.ListSandboxes(tc.ctx, &sandboxv1.ListSandboxesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sb := range resp.GetSandboxes() {
				got = append(got, sb.GetSessionId())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("listed %v, want %v", got, tc.want)
			}
		}
	})

	t.Run("ListSnapshotsOfEverySession", func(t *testing.T) {
		for _, tc := range []struct {
			ctx  context.Context
			want []string
		}{
			{attacker, []string{own.GetSnapshot().GetSnapshotId()}},
			{victim, []string{victimTarget.snapshot}},
		} {
			resp, err := c.ListSnapshots(tc.ctx, &sandboxv1.ListSnapshotsRequest{SessionId: "-"})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sn := range resp.GetSnapshots() {
				got = append(got, sn.GetSnapshotId())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("listed %v, want %v", got, tc.want)
			}
		}
	})

	t.Run("VictimSnapshotIntoOwnSession", func(t *testing.T) {
		// Restoring the victim's snapshot into the attacker's own session
		// is answered as for a snapshot that does not exist.
		restore := func(snapshot string) error {
			_, err := c.RestoreSnapshot(attacker, &sandboxv1.RestoreSnapshotRequest{SessionId: "attacker-sess", SnapshotId: snapshot})
			return err
		}
		gc, gm := answer(restore(victimTarget.snapshot), victimTarget)
		uc, um := answer(restore(unknown.snapshot), unknown)
		if gc != codes.NotFound || gc != uc || gm != um {
			t.Fatalf("restore of the victim's snapshot: %v %q; of an unknown one: %v %q", gc, gm, uc, um)
		}
		if _, err := c.StatFile(attacker, &sandboxv1.StatFileRequest{SessionId: "attacker-sess", Path: "secret.txt"}); status.Code(err) != codes.NotFound {
			t.Fatalf("the victim's file reached the attacker's sandbox: %v", err)
		}
	})

	t.Run("CreateSandbox", func(t *testing.T) {
		create := func(id, snapshot string) error {
			_, err := c.CreateSandbox(attacker, &sandboxv1.CreateSandboxRequest{SessionId: id, SnapshotId: snapshot})
			return err
		}
		// Seeded from the victim's snapshot: as if it did not exist.
		gc, gm := answer(create("attacker-new", victimTarget.snapshot), victimTarget)
		uc, um := answer(create("attacker-new", unknown.snapshot), unknown)
		if gc != codes.NotFound || gc != uc || gm != um {
			t.Fatalf("create from the victim's snapshot: %v %q; from an unknown one: %v %q", gc, gm, uc, um)
		}
		if _, err := c.GetSandbox(attacker, &sandboxv1.GetSandboxRequest{SessionId: "attacker-new"}); status.Code(err) != codes.NotFound {
			t.Fatalf("a sandbox was made from the victim's snapshot: %v", err)
		}
		// Session ids are the session service's: taking one in use fails
		// whoever owns it, and the sandbox stays its owner's.
		if err := create("victim-sess", ""); status.Code(err) != codes.AlreadyExists {
			t.Fatalf("create over the victim's session: %v, want AlreadyExists", err)
		}
	})
	victimIntact(t, "every attack")

	// The owner, and a system call, still reach everything.
	if _, err := c.RestoreSnapshot(victim, &sandboxv1.RestoreSnapshotRequest{SessionId: "victim-sess", SnapshotId: victimTarget.snapshot}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("owner's restore while a process runs: %v, want FailedPrecondition", err)
	}
	if _, err := c.GetSandbox(context.Background(), &sandboxv1.GetSandboxRequest{SessionId: "victim-sess"}); err != nil {
		t.Fatalf("system call: %v", err)
	}
	if _, err := c.DeleteSnapshot(victim, &sandboxv1.DeleteSnapshotRequest{SessionId: "victim-sess", SnapshotId: victimTarget.snapshot}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteSandbox(victim, &sandboxv1.DeleteSandboxRequest{SessionId: "victim-sess"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSandbox(victim, &sandboxv1.GetSandboxRequest{SessionId: "victim-sess"}); status.Code(err) != codes.NotFound {
		t.Fatalf("after the owner's delete: %v, want NotFound", err)
	}
}

// A sandbox adopted after a restart keeps its owner, from its meta.json.
func TestTenancySurvivesReconcile(t *testing.T) {
	cfg := testConfig(t)
	scrubOnCleanup(t, cfg.Root)
	crashed, err := New(context.Background(), cfg, Deps{Logger: quietLogger(), Tenancy: authtest.Tenancy})
	if err != nil {
		t.Fatal(err)
	}
	ctx := authtest.Incoming(context.Background(), authtest.Victim)
	if _, err := crashed.create(ctx, "kept", "", Limits{}, "", false, nil); err != nil {
		t.Fatal(err)
	}
	crashed = nil // dropped without Close, as a killed process would

	h := newHarness(t, cfg, Deps{Tenancy: authtest.Tenancy})
	if _, err := h.svc.Reconcile(context.Background(), func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.GetSandbox(asTenant(t, authtest.Attacker), &sandboxv1.GetSandboxRequest{SessionId: "kept"})
	wantCode(t, err, codes.NotFound)
	if _, err := h.client.GetSandbox(asTenant(t, authtest.Victim), &sandboxv1.GetSandboxRequest{SessionId: "kept"}); err != nil {
		t.Fatalf("owner after reconcile: %v", err)
	}
}

// With auth on, a call that reaches the service with no principal is
// anonymous, not the system: it finds no sandbox, not even one made for no
// tenant, lists none and may not create one.
func TestTenancyAnonymousIsNotTheSystem(t *testing.T) {
	cfg := testConfig(t)
	scrubOnCleanup(t, cfg.Root)
	h := newHarness(t, cfg, Deps{Tenancy: authtest.AuthOn})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	system := auth.AsSystem(ctx)
	if _, err := h.svc.createSandbox(system, "system-sess", ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.deleteSandbox(auth.AsSystem(context.Background()), "system-sess") })
	anon := ctx // the harness's server has no interceptors: no principal
	if _, err := h.client.GetSandbox(anon, &sandboxv1.GetSandboxRequest{SessionId: "system-sess"}); status.Code(err) != codes.NotFound {
		t.Fatalf("anonymous GetSandbox of the system's sandbox: %v, want NotFound", err)
	}
	if _, err := h.client.ReadFile(anon, &sandboxv1.ReadFileRequest{SessionId: "system-sess", Path: "x"}); status.Code(err) != codes.NotFound {
		t.Fatalf("anonymous ReadFile in the system's sandbox: %v, want NotFound", err)
	}
	if l, err := h.client.ListSandboxes(anon, &sandboxv1.ListSandboxesRequest{}); err != nil || len(l.GetSandboxes()) != 0 {
		t.Fatalf("anonymous ListSandboxes: %v, %v; want none", l.GetSandboxes(), err)
	}
	if _, err := h.client.CreateSandbox(anon, &sandboxv1.CreateSandboxRequest{SessionId: "anon-sess"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("anonymous CreateSandbox: %v, want Unauthenticated", err)
	}
	if _, err := h.svc.lookup(system, "system-sess"); err != nil {
		t.Fatalf("the system lost its own sandbox: %v", err)
	}
}
