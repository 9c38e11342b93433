package history_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	"github.com/deskgrid/deskgrid/services/history"
	"github.com/deskgrid/deskgrid/services/history/internal/blob"
	"github.com/deskgrid/deskgrid/services/history/internal/storetest"
	"github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// publishRun publishes an event of run in session as the agent does: the run
// id in the envelope.
func publishRun(t *testing.T, e *env, tenant, session, run, typ string, payload proto.Message) *eventsv1.Event {
	t.Helper()
	ev := &eventsv1.Event{Id: events.NewID(), Type: typ, Time: timestamppb.Now(), Tenant: tenant, SessionId: session, RunId: run}
	if payload != nil {
		a, err := anypb.New(payload)
		if err != nil {
			t.Fatal(err)
		}
		ev.Payload = a
	}
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(context.Background(), events.Subject(session, typ), b); err != nil {
		t.Fatal(err)
	}
	return ev
}

var png = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR fake screenshot")

// publishAgentRun publishes one step of each kind for run in session and
// returns how many events it published.
func publishAgentRun(t *testing.T, e *env, tenant, session, run string) int {
	publishRun(t, e, tenant, session, run, "agent.run_state_changed.v1", nil)
	publishRun(t, e, tenant, session, run, "agent.message.v1", &historyv1.AgentMessage{Role: historyv1.Role_ROLE_USER, Text: "Open the invoice in the browser"})
	publishRun(t, e, tenant, session, run, "agent.message.v1", &historyv1.AgentMessage{Role: historyv1.Role_ROLE_ASSISTANT, Text: "Taking a screenshot first", Thinking: "the browser may be closed"})
	publishRun(t, e, tenant, session, run, "agent.tool_call.v1", &historyv1.AgentToolCall{CallId: "c1", Tool: "computer", InputJson: `{"action":"screenshot"}`})
	publishRun(t, e, tenant, session, run, "agent.screenshot.v1", &historyv1.AgentScreenshot{CallId: "c1", ContentType: "image/png", Data: png, Width: 1280, Height: 800})
	publishRun(t, e, tenant, session, run, "agent.tool_result.v1", &historyv1.AgentToolResult{CallId: "c1", Tool: "computer", Output: "screenshot taken"})
	publishRun(t, e, tenant, session, run, "agent.usage.v1", &historyv1.AgentUsage{Provider: "anthropic", InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 1000})
	publishRun(t, e, tenant, session, run, "agent.usage.v1", &historyv1.AgentUsage{Provider: "anthropic", InputTokens: 300, OutputTokens: 20})
	return 8
}

func blobConfig(t *testing.T) history.Config {
	cfg := testConfig()
	cfg.BlobDir = t.TempDir()
	return cfg
}

func TestAgentRun(t *testing.T) {
	for _, o := range storetest.All {
		t.Run(o.Name, func(t *testing.T) {
			e := newEnv(t)
			st := o.Open(t)
			svc := startService(t, e, st, blobConfig(t))
			c := client(t, svc)
			ctx := context.Background()
			n := publishAgentRun(t, e, "acme", "s1", "run-1")
			publishRun(t, e, "acme", "s1", "run-2", "agent.message.v1", &historyv1.AgentMessage{Text: "another run mentions the invoice"})
			publish(t, e, "s1", 1)
			waitCount(t, st, n+2)

			tr, err := c.GetRunTranscript(ctx, &historyv1.GetRunTranscriptRequest{RunId: "run-1"})
			if err != nil {
				t.Fatal(err)
			}
			wantKinds := []historyv1.EntryKind{
				historyv1.EntryKind_ENTRY_KIND_LIFECYCLE, historyv1.EntryKind_ENTRY_KIND_MESSAGE, historyv1.EntryKind_ENTRY_KIND_MESSAGE,
				historyv1.EntryKind_ENTRY_KIND_TOOL_CALL, historyv1.EntryKind_ENTRY_KIND_SCREENSHOT, historyv1.EntryKind_ENTRY_KIND_TOOL_RESULT,
				historyv1.EntryKind_ENTRY_KIND_USAGE, historyv1.EntryKind_ENTRY_KIND_USAGE,
			}
			if len(tr.GetEntries()) != len(wantKinds) || tr.GetSessionId() != "s1" || tr.GetTruncated() {
				t.Fatalf("transcript: %d entries, session %q, truncated %v", len(tr.GetEntries()), tr.GetSessionId(), tr.GetTruncated())
			}
			for i, en := range tr.GetEntries() {
				if en.GetKind() != wantKinds[i] || en.GetRunId() != "run-1" || en.GetTenant() != "acme" {
					t.Fatalf("entry %d: kind %v run %q tenant %q", i, en.GetKind(), en.GetRunId(), en.GetTenant())
				}
			}
			u := tr.GetUsage()
			if u.GetInputTokens() != 1500 || u.GetOutputTokens() != 100 || u.GetCacheReadTokens() != 1000 || u.GetCalls() != 2 {
				t.Errorf("usage %v", u)
			}

			// The screenshot is a blob, referred to by hash.
			shot := tr.GetEntries()[4]
			if shot.GetBlobHash() != blob.Hash(png) || shot.GetData().GetFields()["blobHash"].GetStringValue() != blob.Hash(png) {
				t.Fatalf("screenshot entry %v", shot)
			}
			if _, ok := shot.GetData().GetFields()["data"]; ok {
				t.Error("screenshot bytes kept in the entry")
			}
			got, err := c.GetBlob(ctx, &historyv1.GetBlobRequest{Hash: shot.GetBlobHash()})
			if err != nil || !bytes.Equal(got.GetData(), png) || got.GetContentType() != "image/png" {
				t.Fatalf("blob: %v, %v", got, err)
			}

			// Kinds and time filters.
			page, err := c.ListRunEntries(ctx, &historyv1.ListRunEntriesRequest{RunId: "run-1", Kinds: []historyv1.EntryKind{historyv1.EntryKind_ENTRY_KIND_MESSAGE}})
			if err != nil || len(page.GetEntries()) != 2 {
				t.Fatalf("messages of run-1: %v, %v", page, err)
			}
			all := listAll(t, c, &historyv1.ListSessionHistoryRequest{SessionId: "s1", Kinds: []historyv1.EntryKind{historyv1.EntryKind_ENTRY_KIND_LIFECYCLE}})
			if len(all) != 2 {
				t.Fatalf("%d lifecycle entries in s1; want 2", len(all))
			}
			future := timestamppb.New(time.Now().Add(time.Hour))
			if resp, err := c.ListSessionHistory(ctx, &historyv1.ListSessionHistoryRequest{SessionId: "s1", StartTime: future}); err != nil || len(resp.GetEntries()) != 0 {
				t.Fatalf("entries after an hour from now: %v, %v", resp, err)
			}

			// Search finds message text and tool output, newest first.
			sr, err := c.SearchHistory(ctx, &historyv1.SearchHistoryRequest{Query: "invoice", Tenant: "acme"})
			if err != nil || len(sr.GetEntries()) != 2 || sr.GetEntries()[0].GetRunId() != "run-2" {
				t.Fatalf("search: %v, %v", sr, err)
			}
			sr, err = c.SearchHistory(ctx, &historyv1.SearchHistoryRequest{Query: "browser closed", SessionId: "s1"})
			if err != nil || len(sr.GetEntries()) != 1 {
				t.Fatalf("search in thinking: %v, %v", sr, err)
			}
			if sr, err := c.SearchHistory(ctx, &historyv1.SearchHistoryRequest{Query: "invoice", Tenant: "other"}); err != nil || len(sr.GetEntries()) != 0 {
				t.Fatalf("search of another tenant: %v, %v", sr, err)
			}
		})
	}
}

// export reads a session's export whole.
func export(t *testing.T, c historyv1.HistoryServiceClient, req *historyv1.ExportSessionHistoryRequest) ([]byte, error) {
	t.Helper()
	stream, err := c.ExportSessionHistory(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var doc []byte
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return doc, nil
		}
		if err != nil {
			return nil, err
		}
		doc = append(doc, m.GetChunk()...)
	}
}

// importDoc sends doc in chunks of the given size.
func importDoc(t *testing.T, c historyv1.HistoryServiceClient, session string, doc []byte, chunk int) (*historyv1.ImportSessionHistoryResponse, error) {
	t.Helper()
	stream, err := c.ImportSessionHistory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first := true
	for len(doc) > 0 || first {
		k := min(chunk, len(doc))
		req := &historyv1.ImportSessionHistoryRequest{Chunk: doc[:k]}
		if first {
			req.SessionId = session
			first = false
		}
		doc = doc[k:]
		if err := stream.Send(req); err != nil {
			break // the server ended the call; CloseAndRecv says why
		}
	}
	return stream.CloseAndRecv()
}

func TestExportImport(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	svc := startService(t, e, st, blobConfig(t))
	c := client(t, svc)
	n := publishAgentRun(t, e, "acme", "s1", "run-1")
	publish(t, e, "s1", 300)
	waitCount(t, st, n+300)

	doc, err := export(t, c, &historyv1.ExportSessionHistoryRequest{SessionId: "s1", IncludeBlobs: true})
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(doc), "\n"); lines != n+300 {
		t.Fatalf("export has %d lines; want %d", lines, n+300)
	}
	if _, err := export(t, c, &historyv1.ExportSessionHistoryRequest{SessionId: "nobody"}); status.Code(err) != codes.NotFound {
		t.Fatalf("export of an unknown session: %v", err)
	}

	// Into another deployment: its own NATS, database and blob directory.
	e2 := newEnv(t)
	st2 := storetest.Postgres(t)
	c2 := client(t, startService(t, e2, st2, blobConfig(t)))
	resp, err := importDoc(t, c2, "s1", doc, 1000)
	if err != nil || resp.GetImported() != int64(n+300) || resp.GetSkipped() != 0 {
		t.Fatalf("import: %v, %v", resp, err)
	}
	// Again: every entry is already there.
	resp, err = importDoc(t, c2, "s1", doc, 1<<20)
	if err != nil || resp.GetImported() != 0 || resp.GetSkipped() != int64(n+300) {
		t.Fatalf("second import: %v, %v", resp, err)
	}
	before := listAll(t, c, &historyv1.ListSessionHistoryRequest{SessionId: "s1", PageSize: 1000})
	after := listAll(t, c2, &historyv1.ListSessionHistoryRequest{SessionId: "s1", PageSize: 1000})
	if len(before) != len(after) {
		t.Fatalf("%d entries imported; want %d", len(after), len(before))
	}
	for i := range before {
		// PostgreSQL keeps microseconds.
		before[i].Time = timestamppb.New(before[i].GetTime().AsTime().Truncate(time.Microsecond))
		if !proto.Equal(before[i], after[i]) {
			t.Fatalf("entry %d differs:\n%v\n%v", i, before[i], after[i])
		}
	}
	// The screenshot came along.
	got, err := c2.GetBlob(context.Background(), &historyv1.GetBlobRequest{Hash: blob.Hash(png)})
	if err != nil || !bytes.Equal(got.GetData(), png) {
		t.Fatalf("imported blob: %v", err)
	}
	if sr, err := c2.SearchHistory(context.Background(), &historyv1.SearchHistoryRequest{Query: "invoice"}); err != nil || len(sr.GetEntries()) != 1 {
		t.Fatalf("search after import: %v, %v", sr, err)
	}
}

func TestImportIsAllOrNothing(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	c := client(t, startService(t, e, st, blobConfig(t)))
	good := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"sessionId":"s1","sequence":"1","type":"agent.message.v1","time":"2026-01-02T03:04:05Z","data":{"text":"hello"}}`, id)
	}
	tests := []struct {
		name     string
		session  string
		doc      string
		wantCode codes.Code
		wantMsg  string
	}{
		{"not JSON", "s1", good("a") + "\n" + good("b") + "\n{nope\n", codes.InvalidArgument, "line 3"},
		{"unknown field", "s1", good("a") + "\n" + `{"id":"x","type":"t.v1","time":"2026-01-02T03:04:05Z","colour":"red"}`, codes.InvalidArgument, "line 2"},
		{"no id", "s1", `{"type":"t.v1","time":"2026-01-02T03:04:05Z"}`, codes.InvalidArgument, "line 1: id is required"},
		{"no time", "s1", good("a") + "\n\n" + `{"id":"x","type":"t.v1"}`, codes.InvalidArgument, "line 3: time is required"},
		{"other session", "s1", good("a") + "\n" + strings.Replace(good("b"), `"s1"`, `"s2"`, 1), codes.InvalidArgument, "line 2: the entry is of session"},
		{"bad blob hash", "s1", `{"id":"x","type":"t.v1","time":"2026-01-02T03:04:05Z","blobHash":"../x"}`, codes.InvalidArgument, "line 1: blobHash"},
		{"negative sequence", "s1", `{"id":"x","type":"t.v1","sequence":"-4","time":"2026-01-02T03:04:05Z"}`, codes.InvalidArgument, "line 1: sequence"},
		{"empty", "s1", "\n\n", codes.InvalidArgument, "no entries"},
		{"no session", "", good("a"), codes.InvalidArgument, "session_id is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := importDoc(t, c, tc.session, []byte(tc.doc), 7)
			if status.Code(err) != tc.wantCode || !strings.Contains(status.Convert(err).Message(), tc.wantMsg) {
				t.Fatalf("err %v; want %v containing %q", err, tc.wantCode, tc.wantMsg)
			}
			if rows, _ := storetest.Count(t, st); rows != 0 {
				t.Fatalf("a failed import stored %d entries", rows)
			}
		})
	}
	// A good one, to show the lines above were refused for what they hold.
	resp, err := importDoc(t, c, "s1", []byte(good("a")+"\n"+good("b")), 7)
	if err != nil || resp.GetImported() != 2 {
		t.Fatalf("good import: %v, %v", resp, err)
	}
}

func TestImportTooLarge(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	cfg := blobConfig(t)
	cfg.MaxImportBytes = 100
	c := client(t, startService(t, e, st, cfg))
	_, err := importDoc(t, c, "s1", bytes.Repeat([]byte("\n"), 500), 50)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("err %v; want ResourceExhausted", err)
	}
}

func TestDeleteAndSweep(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	cfg := blobConfig(t)
	cfg.SweepInterval = -1 // swept by hand below
	cfg.BlobGrace = time.Nanosecond
	svc := startService(t, e, st, cfg)
	c := client(t, svc)
	ctx := context.Background()
	n := publishAgentRun(t, e, "acme", "s1", "run-1")
	// The same screenshot in another session: the blob is shared.
	publishRun(t, e, "acme", "s2", "run-2", "agent.screenshot.v1", &historyv1.AgentScreenshot{Data: png})
	waitCount(t, st, n+1)

	resp, err := c.DeleteSessionHistory(ctx, &historyv1.DeleteSessionHistoryRequest{SessionId: "s1"})
	if err != nil || resp.GetDeletedEntries() != int64(n) {
		t.Fatalf("delete: %v, %v", resp, err)
	}
	if _, err := c.DeleteSessionHistory(ctx, &historyv1.DeleteSessionHistoryRequest{SessionId: "s1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := c.ListSessionHistory(ctx, &historyv1.ListSessionHistoryRequest{SessionId: "s1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("list after delete: %v", err)
	}
	if _, err := c.GetRunTranscript(ctx, &historyv1.GetRunTranscriptRequest{RunId: "run-1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("transcript after delete: %v", err)
	}
	// s2 still refers to the blob: the sweep keeps it.
	if res, err := svc.Sweep(ctx); err != nil || res.Blobs != 0 {
		t.Fatalf("sweep: %+v, %v", res, err)
	}
	if _, err := c.GetBlob(ctx, &historyv1.GetBlobRequest{Hash: blob.Hash(png)}); err != nil {
		t.Fatalf("shared blob: %v", err)
	}
	if _, err := c.DeleteSessionHistory(ctx, &historyv1.DeleteSessionHistoryRequest{SessionId: "s2"}); err != nil {
		t.Fatal(err)
	}
	if res, err := svc.Sweep(ctx); err != nil || res.Blobs != 1 {
		t.Fatalf("sweep: %+v, %v", res, err)
	}
	if _, err := c.GetBlob(ctx, &historyv1.GetBlobRequest{Hash: blob.Hash(png)}); status.Code(err) != codes.NotFound {
		t.Fatalf("blob after sweep: %v", err)
	}
}

func TestRetention(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	cfg := testConfig()
	cfg.SweepInterval = -1
	cfg.RetentionMaxEntriesPerTenant = 5
	cfg.RetentionTenants = map[string]history.RetentionPolicy{"big": {MaxEntries: 50}, "brief": {MaxAge: time.Hour}}
	svc := startService(t, e, st, cfg)
	ctx := context.Background()
	old := time.Now().Add(-2 * time.Hour)
	var entries []store.Entry
	for i := range 20 {
		for _, tenant := range []string{"small", "big", "brief"} {
			tm := time.Now()
			if i < 8 {
				tm = old
			}
			entries = append(entries, store.Entry{ID: fmt.Sprint(tenant, i), SessionID: "s-" + tenant, Sequence: int64(i + 1), Type: "x.v1", Time: tm, Tenant: tenant})
		}
	}
	if _, err := st.Append(ctx, entries); err != nil {
		t.Fatal(err)
	}
	res, err := svc.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	usage, err := st.Tenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// small keeps its newest 5; big is under its 50; brief loses its 8 old
	// entries to age and then keeps the default 5.
	if fmt.Sprint(usage) != "[{big 20} {brief 5} {small 5}]" || res.Entries != 30 {
		t.Fatalf("after the sweep: %v, %d deleted", usage, res.Entries)
	}
}

func TestNewRPCValidation(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	c := client(t, startService(t, e, st, blobConfig(t)))
	publishAgentRun(t, e, "acme", "s1", "run-1")
	waitCount(t, st, 8)
	ctx := context.Background()
	first, err := c.ListRunEntries(ctx, &historyv1.ListRunEntriesRequest{RunId: "run-1", PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t0 := timestamppb.New(time.Now())
	tests := []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"run entries", func() error {
			_, err := c.ListRunEntries(ctx, &historyv1.ListRunEntriesRequest{RunId: "run-1"})
			return err
		}, codes.OK},
		{"run entries next page", func() error {
			_, err := c.ListRunEntries(ctx, &historyv1.ListRunEntriesRequest{RunId: "run-1", PageSize: 2, PageToken: first.GetNextPageToken()})
			return err
		}, codes.OK},
		{"run token for a session", func() error {
			_, err := c.ListSessionHistory(ctx, &historyv1.ListSessionHistoryRequest{SessionId: "s1", PageSize: 2, PageToken: first.GetNextPageToken()})
			return err
		}, codes.InvalidArgument},
		{"no run", func() error { _, err := c.ListRunEntries(ctx, &historyv1.ListRunEntriesRequest{}); return err }, codes.InvalidArgument},
		{"unknown run", func() error {
			_, err := c.ListRunEntries(ctx, &historyv1.ListRunEntriesRequest{RunId: "nope"})
			return err
		}, codes.NotFound},
		{"unspecified kind", func() error {
			_, err := c.ListRunEntries(ctx, &historyv1.ListRunEntriesRequest{RunId: "run-1", Kinds: []historyv1.EntryKind{0}})
			return err
		}, codes.InvalidArgument},
		{"unknown kind", func() error {
			_, err := c.ListSessionHistory(ctx, &historyv1.ListSessionHistoryRequest{SessionId: "s1", Kinds: []historyv1.EntryKind{99}})
			return err
		}, codes.InvalidArgument},
		{"end before start", func() error {
			_, err := c.ListSessionHistory(ctx, &historyv1.ListSessionHistoryRequest{SessionId: "s1", StartTime: t0, EndTime: t0})
			return err
		}, codes.InvalidArgument},
		{"invalid time", func() error {
			_, err := c.ListSessionHistory(ctx, &historyv1.ListSessionHistoryRequest{SessionId: "s1", StartTime: &timestamppb.Timestamp{Nanos: -1}})
			return err
		}, codes.InvalidArgument},
		{"transcript of no run", func() error { _, err := c.GetRunTranscript(ctx, &historyv1.GetRunTranscriptRequest{}); return err }, codes.InvalidArgument},
		{"transcript of unknown run", func() error {
			_, err := c.GetRunTranscript(ctx, &historyv1.GetRunTranscriptRequest{RunId: "nope"})
			return err
		}, codes.NotFound},
		{"search without query", func() error { _, err := c.SearchHistory(ctx, &historyv1.SearchHistoryRequest{}); return err }, codes.InvalidArgument},
		{"search of punctuation", func() error {
			_, err := c.SearchHistory(ctx, &historyv1.SearchHistoryRequest{Query: "*&^"})
			return err
		}, codes.InvalidArgument},
		{"search page size", func() error {
			_, err := c.SearchHistory(ctx, &historyv1.SearchHistoryRequest{Query: "x", PageSize: 1001})
			return err
		}, codes.InvalidArgument},
		{"search bad token", func() error {
			_, err := c.SearchHistory(ctx, &historyv1.SearchHistoryRequest{Query: "x", PageToken: "zz"})
			return err
		}, codes.InvalidArgument},
		{"delete no session", func() error {
			_, err := c.DeleteSessionHistory(ctx, &historyv1.DeleteSessionHistoryRequest{})
			return err
		}, codes.InvalidArgument},
		{"blob bad hash", func() error {
			_, err := c.GetBlob(ctx, &historyv1.GetBlobRequest{Hash: "../../etc/passwd"})
			return err
		}, codes.InvalidArgument},
		{"blob upper case", func() error {
			_, err := c.GetBlob(ctx, &historyv1.GetBlobRequest{Hash: strings.ToUpper(blob.Hash(png))})
			return err
		}, codes.InvalidArgument},
		{"unknown blob", func() error { _, err := c.GetBlob(ctx, &historyv1.GetBlobRequest{Hash: blob.Hash(nil)}); return err }, codes.NotFound},
		{"export no session", func() error { _, err := export(t, c, &historyv1.ExportSessionHistoryRequest{}); return err }, codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); status.Code(err) != tc.code {
				t.Fatalf("code %v (%v); want %v", status.Code(err), err, tc.code)
			}
		})
	}
}

// TestSweeperRunsInBackground checks that the sweeper applies retention by
// itself every SweepInterval, and stops with the service.
func TestSweeperRunsInBackground(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	cfg := testConfig()
	cfg.SweepInterval = 20 * time.Millisecond
	cfg.RetentionMaxEntriesPerTenant = 3
	svc := startService(t, e, st, cfg)
	publish(t, e, "s1", 10)
	testkit.Eventually(t, 30*time.Second, func() bool {
		rows, _ := storetest.Count(t, st)
		return svc.IngestStats().Stored == 10 && rows == 3
	}, "the sweeper to trim the tenant to 3 entries")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// failingBlobs refuses the first puts, as an object store that is down.
type failingBlobs struct {
	blob.Store
	mu    sync.Mutex
	fails int
}

func (f *failingBlobs) Put(ctx context.Context, data []byte) (string, error) {
	f.mu.Lock()
	fail := f.fails > 0
	if fail {
		f.fails--
	}
	f.mu.Unlock()
	if fail {
		return "", errors.New("object store unavailable")
	}
	return f.Store.Put(ctx, data)
}

// TestBlobStoreFailureRedelivers checks that a screenshot whose bytes could
// not be kept is not acknowledged: it comes back and is stored later.
func TestBlobStoreFailureRedelivers(t *testing.T) {
	e := newEnv(t)
	st := storetest.SQLite(t)
	dir, err := blob.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	blobs := &failingBlobs{Store: dir, fails: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc, err := history.New(ctx, testConfig(), history.Deps{Logger: testLogger(t), Store: st, JS: e.js, Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	publishRun(t, e, "acme", "s1", "r1", "agent.screenshot.v1", &historyv1.AgentScreenshot{Data: png})
	waitCount(t, st, 1)
	if got := svc.IngestStats().StoreFailures; got != 2 {
		t.Errorf("%d failures; want 2", got)
	}
	got, err := client(t, svc).GetBlob(ctx, &historyv1.GetBlobRequest{Hash: blob.Hash(png)})
	if err != nil || !bytes.Equal(got.GetData(), png) {
		t.Fatalf("blob: %v", err)
	}
}
