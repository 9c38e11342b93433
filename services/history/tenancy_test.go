package history_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	"github.com/deskgrid/deskgrid/services/history"
	"github.com/deskgrid/deskgrid/services/history/internal/blob"
	"github.com/deskgrid/deskgrid/services/history/internal/storetest"
	"github.com/deskgrid/deskgrid/services/platform/auth/authtest"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/videostore"
)

// target names what an attack aims at.
type target struct{ session, run, blob string }

type historyCall func(ctx context.Context, c historyv1.HistoryServiceClient, tg target) error

// targetCalls make each RPC that names a session, run or blob against a
// target.
var targetCalls = map[string]historyCall{
	"ListSessionHistory": func(ctx context.Context, c historyv1.HistoryServiceClient, tg target) error {
		_, err := c.ListSessionHistory(ctx, &historyv1.ListSessionHistoryRequest{SessionId: tg.session})
		return err
	},
	"ListRunEntries": func(ctx context.Context, c historyv1.HistoryServiceClient, tg target) error {
		_, err := c.ListRunEntries(ctx, &historyv1.ListRunEntriesRequest{RunId: tg.run})
		return err
	},
	"GetRunTranscript": func(ctx context.Context, c historyv1.HistoryServiceClient, tg target) error {
		_, err := c.GetRunTranscript(ctx, &historyv1.GetRunTranscriptRequest{RunId: tg.run})
		return err
	},
	"SearchHistory": func(ctx context.Context, c historyv1.HistoryServiceClient, tg target) error {
		resp, err := c.SearchHistory(ctx, &historyv1.SearchHistoryRequest{Query: "invoice", SessionId: tg.session})
		if err == nil && len(resp.GetEntries()) > 0 {
			return fmt.Errorf("found %d entries", len(resp.GetEntries()))
		}
		return err
	},
	"ExportSessionHistory": func(ctx context.Context, c historyv1.HistoryServiceClient, tg target) error {
		st, err := c.ExportSessionHistory(ctx, &historyv1.ExportSessionHistoryRequest{SessionId: tg.session, IncludeBlobs: true})
		if err != nil {
			return err
		}
		return authtest.Drain(st.Recv)
	},
	"GetBlob": func(ctx context.Context, c historyv1.HistoryServiceClient, tg target) error {
		_, err := c.GetBlob(ctx, &historyv1.GetBlobRequest{Hash: tg.blob})
		return err
	},
	"ListRecordings": func(ctx context.Context, c historyv1.HistoryServiceClient, tg target) error {
		_, err := c.ListRecordings(ctx, &historyv1.ListRecordingsRequest{SessionId: tg.session})
		return err
	},
	"GetRecording": func(ctx context.Context, c historyv1.HistoryServiceClient, tg target) error {
		_, err := c.GetRecording(ctx, &historyv1.GetRecordingRequest{SessionId: tg.session, RecordingId: "rec-1"})
		return err
	},
	"DownloadRecording": func(ctx context.Context, c historyv1.HistoryServiceClient, tg target) error {
		st, err := c.DownloadRecording(ctx, &historyv1.DownloadRecordingRequest{SessionId: tg.session, RecordingId: "rec-1"})
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	},
	"DeleteSessionHistory": func(ctx context.Context, c historyv1.HistoryServiceClient, tg target) error {
		_, err := c.DeleteSessionHistory(ctx, &historyv1.DeleteSessionHistoryRequest{SessionId: tg.session})
		return err
	},
}

// answersWithoutNotFound are the calls whose answer for something never
// recorded is not NotFound: a search finds nothing.
var answersWithoutNotFound = []string{"SearchHistory"}

// writeCalls add to history rather than read it; the test checks them on
// their own.
var writeCalls = []string{"ImportSessionHistory"}

// Every RPC must be checked for ownership: one added to the service without
// an entry here fails.
func TestTenancyCoversEveryRPC(t *testing.T) {
	authtest.RequireCases(t, historyv1.HistoryService_ServiceDesc, slices.Collect(maps.Keys(targetCalls)), writeCalls)
}

func answer(err error, tg target) (codes.Code, string) {
	return authtest.Answer(err, tg.session, tg.run, tg.blob)
}

var victimPNG = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR the victim's invoice")

// importLines sends JSON Lines as tenant into session.
func importLines(ctx context.Context, c historyv1.HistoryServiceClient, session string, entries ...*historyv1.Entry) (*historyv1.ImportSessionHistoryResponse, error) {
	var doc bytes.Buffer
	for _, e := range entries {
		b, err := protojson.Marshal(e)
		if err != nil {
			return nil, err
		}
		doc.Write(b)
		doc.WriteByte('\n')
	}
	st, err := c.ImportSessionHistory(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&historyv1.ImportSessionHistoryRequest{SessionId: session, Chunk: doc.Bytes()}); err != nil && err != io.EOF {
		return nil, err
	}
	return st.CloseAndRecv()
}

// An attacker tenant gets, for the victim's session, run and screenshot,
// exactly the answer it gets for ones never recorded; it finds nothing of
// them, cannot import its way in, and the victim is unaffected.
func TestTenancyIsolatesHistory(t *testing.T) {
	for _, o := range storetest.All {
		t.Run(o.Name, func(t *testing.T) {
			e := newEnv(t)
			st := o.Open(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			svc, err := history.New(ctx, blobConfig(t), history.Deps{Logger: testLogger(t), Store: st, JS: e.js, Tenancy: authtest.Tenancy})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = svc.Close(context.Background()) })
			c := client(t, svc)
			victim, attacker := authtest.As(context.Background(), authtest.Victim), authtest.As(context.Background(), authtest.Attacker)

			publishRun(t, e, "victim", "victim-sess", "victim-run", "agent.message.v1", &historyv1.AgentMessage{Role: historyv1.Role_ROLE_USER, Text: "Pay the invoice"})
			publishRun(t, e, "victim", "victim-sess", "victim-run", "agent.screenshot.v1", &historyv1.AgentScreenshot{CallId: "c1", ContentType: "image/png", Data: victimPNG})
			publishRun(t, e, "victim", "victim-sess", "victim-run", "agent.usage.v1", &historyv1.AgentUsage{Provider: "anthropic", InputTokens: 10})
			n := 3 + publishAgentRun(t, e, "attacker", "attacker-sess", "attacker-run")
			n += publishRecording(t, e, "attacker", "attacker-sess", "rec-1")
			waitCount(t, st, n)

			victimTarget := target{"victim-sess", "victim-run", blob.Hash(victimPNG)}
			unknown := target{"no-such-sess", "no-such-run", blob.Hash([]byte("never stored"))}
			victimIntact := func(t *testing.T, after string) {
				t.Helper()
				resp, err := c.ListSessionHistory(victim, &historyv1.ListSessionHistoryRequest{SessionId: "victim-sess"})
				if err != nil || len(resp.GetEntries()) != 3 {
					t.Fatalf("victim's history after %s: %v, %v", after, resp, err)
				}
				b, err := c.GetBlob(victim, &historyv1.GetBlobRequest{Hash: victimTarget.blob})
				if err != nil || !bytes.Equal(b.GetData(), victimPNG) {
					t.Fatalf("victim's screenshot after %s: %v", after, err)
				}
			}
			victimIntact(t, "ingest")

			for _, name := range authtest.Names(targetCalls, "DeleteSessionHistory") {
				call := targetCalls[name]
				t.Run(name, func(t *testing.T) {
					gc, gm := answer(call(attacker, c, victimTarget), victimTarget)
					uc, um := answer(call(attacker, c, unknown), unknown)
					if gc != uc || gm != um {
						t.Fatalf("another tenant's answers %v %q, one never recorded %v %q", gc, gm, uc, um)
					}
					if !slices.Contains(answersWithoutNotFound, name) && gc != codes.NotFound {
						t.Fatalf("another tenant's: %v %q, want NotFound", gc, gm)
					}
					// The attacker's own history is there for it (kept for the
					// searches below).
					if name != "DeleteSessionHistory" {
						if err := call(attacker, c, target{"attacker-sess", "attacker-run", blob.Hash(png)}); err != nil && !slices.Contains(answersWithoutNotFound, name) {
							t.Fatalf("attacker's own: %v", err)
						}
					}
					victimIntact(t, name)
				})
			}

			t.Run("SearchAcrossTenants", func(t *testing.T) {
				// Unnarrowed, a tenant finds only its own entries.
				resp, err := c.SearchHistory(attacker, &historyv1.SearchHistoryRequest{Query: "invoice"})
				if err != nil {
					t.Fatal(err)
				}
				for _, en := range resp.GetEntries() {
					if en.GetTenant() != "attacker" {
						t.Fatalf("attacker found %v", en)
					}
				}
				if len(resp.GetEntries()) == 0 {
					t.Fatal("attacker does not find its own entries")
				}
				// Naming another tenant is refused, whether it exists or not.
				for _, other := range []string{"victim", "nobody"} {
					_, err := c.SearchHistory(attacker, &historyv1.SearchHistoryRequest{Query: "invoice", Tenant: other})
					if status.Code(err) != codes.PermissionDenied {
						t.Fatalf("search naming tenant %s: %v, want PermissionDenied", other, err)
					}
				}
				// Naming its own works; a system call sees every tenant.
				if _, err := c.SearchHistory(attacker, &historyv1.SearchHistoryRequest{Query: "invoice", Tenant: "attacker"}); err != nil {
					t.Fatal(err)
				}
				all, err := c.SearchHistory(context.Background(), &historyv1.SearchHistoryRequest{Query: "invoice"})
				if err != nil || len(all.GetEntries()) != len(resp.GetEntries())+1 {
					t.Fatalf("system search: %v, %v", all, err)
				}
			})

			t.Run("ImportSessionHistory", func(t *testing.T) {
				seq := int64(1000)
				line := func(id, tenant, blobHash string) *historyv1.Entry {
					seq++
					return &historyv1.Entry{Id: id, Sequence: seq, Type: "agent.screenshot.v1", Time: timestamppb.Now(), Tenant: tenant, BlobHash: blobHash}
				}
				// Lines of another tenant are refused, and nothing is stored.
				_, err := importLines(attacker, c, "victim-sess", line("forged-1", "", ""), line("forged-2", "victim", ""))
				if status.Code(err) != codes.PermissionDenied {
					t.Fatalf("import of the victim's lines: %v, want PermissionDenied", err)
				}
				// Another tenant's session id is not a target: NotFound, as for a
				// session one does not own, and nothing is written into it.
				_, err = importLines(attacker, c, "victim-sess", line("forged-3", "", ""), line("forged-4", "attacker", ""))
				if status.Code(err) != codes.NotFound {
					t.Fatalf("import into the victim's session: %v, want NotFound", err)
				}
				if _, err := c.ListSessionHistory(attacker, &historyv1.ListSessionHistoryRequest{SessionId: "victim-sess"}); status.Code(err) != codes.NotFound {
					t.Fatalf("attacker's entries in the victim's session after a refused import: %v", err)
				}
				// Lines naming no tenant become the importer's, in a new id or
				// one of its own sessions; naming a blob it has no bytes for
				// does not make the victim's screenshot readable.
				for _, sess := range []string{"attacker-new", "attacker-sess"} {
					resp, err := importLines(attacker, c, sess, line(sess+"-5", "", victimTarget.blob), line(sess+"-6", "attacker", ""))
					if err != nil || resp.GetImported() != 2 {
						t.Fatalf("import into %s: %v, %v", sess, resp, err)
					}
				}
				if _, err := c.GetBlob(attacker, &historyv1.GetBlobRequest{Hash: victimTarget.blob}); status.Code(err) != codes.NotFound {
					t.Fatalf("attacker reads the victim's screenshot after naming it in an import: %v", err)
				}
				mine, err := c.ListSessionHistory(attacker, &historyv1.ListSessionHistoryRequest{SessionId: "attacker-new"})
				if err != nil || len(mine.GetEntries()) != 2 {
					t.Fatalf("attacker's imported entries: %v, %v", mine, err)
				}
				for _, en := range mine.GetEntries() {
					if en.GetTenant() != "attacker" || en.GetBlobHash() != "" {
						t.Fatalf("imported entry %v: want the attacker's, with no blob", en)
					}
				}
				// The victim's sequence numbers are its own, without a gap.
				vs, err := c.ListSessionHistory(victim, &historyv1.ListSessionHistoryRequest{SessionId: "victim-sess"})
				if err != nil {
					t.Fatal(err)
				}
				for _, en := range vs.GetEntries() {
					if en.GetTenant() != "victim" {
						t.Fatalf("victim's session holds %v", en)
					}
				}
				victimIntact(t, "import")
				// The victim's delete takes its own entries only.
				del, err := c.DeleteSessionHistory(victim, &historyv1.DeleteSessionHistoryRequest{SessionId: "victim-sess"})
				if err != nil || del.GetDeletedEntries() != 3 {
					t.Fatalf("victim's delete: %v, %v", del, err)
				}
			})
		})
	}
}

// With auth on, a call that reaches the service with no principal is
// anonymous, not the system: every read, search, export, delete and import
// is refused as Unauthenticated rather than run across all tenants.
func TestTenancyAnonymousIsNotTheSystem(t *testing.T) {
	e := newEnv(t)
	st := storetest.All[0].Open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc, err := history.New(ctx, blobConfig(t), history.Deps{Logger: testLogger(t), Store: st, JS: e.js, Tenancy: authtest.AuthOn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	c := client(t, svc) // no interceptors: no principal
	tg := target{session: "some-sess", run: "some-run", blob: strings.Repeat("ab", 32)}
	for name, call := range targetCalls {
		if err := call(ctx, c, tg); status.Code(err) != codes.Unauthenticated {
			t.Errorf("anonymous %s: %v, want Unauthenticated", name, err)
		}
	}
	if _, err := importLines(ctx, c, "some-sess", &historyv1.Entry{Id: "e1", Sequence: 1, Type: "agent.message.v1", Time: timestamppb.Now()}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("anonymous ImportSessionHistory: %v, want Unauthenticated", err)
	}
}

// publishRecording records a stopped recording of a session, its video in
// the object store, and returns how many events that took.
func publishRecording(t *testing.T, e *env, tenant, session, id string) int {
	t.Helper()
	ctx := context.Background()
	videos, err := videostore.Open(ctx, e.js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := videos.Put(ctx, id, strings.NewReader("a video of "+session)); err != nil {
		t.Fatal(err)
	}
	r := &displayv1.Recording{Id: id, SessionId: session, State: displayv1.RecordingState_RECORDING_STATE_RECORDING, ContentType: "video/mp4", StartTime: timestamppb.Now()}
	if _, err := e.pub.Publish(ctx, events.Meta{Type: events.TypeRecordingStarted, SessionID: session, Tenant: tenant}, r); err != nil {
		t.Fatal(err)
	}
	r.State, r.Object, r.SizeBytes = displayv1.RecordingState_RECORDING_STATE_STOPPED, id, int64(len("a video of "+session))
	if _, err := e.pub.Publish(ctx, events.Meta{Type: events.TypeRecordingStopped, SessionID: session, Tenant: tenant}, r); err != nil {
		t.Fatal(err)
	}
	return 2
}
