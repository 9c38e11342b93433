package payload_test

import (
	"context"
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	"github.com/deskgrid/deskgrid/services/history/internal/blob"
	"github.com/deskgrid/deskgrid/services/history/internal/payload"
	"github.com/deskgrid/deskgrid/services/history/store"
)

func anyJSON(t *testing.T, m proto.Message) string {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	b, err := protojson.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPrepare(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n fake")
	pngHash := blob.Hash(png)
	st, err := structpb.NewStruct(map[string]any{"text": "from a struct", "role": "user"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		typ      string
		data     string
		wantKind store.Kind
		wantText string
		wantBlob string
	}{
		{"message", "agent.message.v1", anyJSON(t, &historyv1.AgentMessage{RunId: "r", Role: historyv1.Role_ROLE_ASSISTANT, Text: "I will click OK", Thinking: "the dialog is open"}),
			store.KindMessage, "I will click OK\nthe dialog is open", ""},
		{"message in a struct", "agent.message.v1", anyJSON(t, st), store.KindMessage, "from a struct", ""},
		{"tool call", "agent.tool_call.v1", anyJSON(t, &historyv1.AgentToolCall{Tool: "bash", InputJson: `{"command":"ls /tmp"}`}),
			store.KindToolCall, "bash\n{\"command\":\"ls /tmp\"}", ""},
		{"tool result", "agent.tool_result.v1", anyJSON(t, &historyv1.AgentToolResult{Tool: "bash", Output: "permission denied", IsError: true}),
			store.KindToolResult, "bash\npermission denied", ""},
		{"screenshot", "agent.screenshot.v1", anyJSON(t, &historyv1.AgentScreenshot{ContentType: "image/png", Data: png, Width: 2, Height: 1}),
			store.KindScreenshot, "", pngHash},
		{"trail call", "trail.exec.v1", anyJSON(t, &eventsv1.Call{Tool: "sandbox.Exec", Input: `{"argv":["ls"]}`, Output: `{"stdout":"notes.txt"}`}),
			store.KindToolCall, "sandbox.Exec\n{\"argv\":[\"ls\"]}\n{\"stdout\":\"notes.txt\"}", ""},
		{"trail action with its screenshot", "trail.perform_actions.v1", anyJSON(t, &eventsv1.Call{Tool: "display.PerformActions", Input: `{}`, Data: png}),
			store.KindToolCall, "display.PerformActions\n{}", pngHash},
		{"trail screenshot", "trail.screenshot.v1", anyJSON(t, &eventsv1.Call{Tool: "display.Screenshot", ContentType: "image/png", Data: png}),
			store.KindScreenshot, "", pngHash},
		{"usage", "agent.usage.v1", anyJSON(t, &historyv1.AgentUsage{InputTokens: 10}), store.KindUsage, "", ""},
		{"lifecycle", "session.state_changed.v1", `{"reason":"text not indexed"}`, store.KindLifecycle, "", ""},
		{"not JSON", "agent.message.v1", `{"text":`, store.KindMessage, "", ""},
		{"no payload", "agent.message.v1", "", store.KindMessage, "", ""},
		{"screenshot with broken base64", "agent.screenshot.v1", `{"data":"!!!"}`, store.KindScreenshot, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			blobs, err := blob.OpenDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			e := store.Entry{ID: "e1", Type: tc.typ, Data: tc.data}
			if err := payload.Prepare(context.Background(), &e, blobs); err != nil {
				t.Fatal(err)
			}
			if e.Kind != tc.wantKind || e.Text != tc.wantText || e.BlobHash != tc.wantBlob {
				t.Fatalf("kind %d text %q blob %q; want %d %q %q", e.Kind, e.Text, e.BlobHash, tc.wantKind, tc.wantText, tc.wantBlob)
			}
			if tc.wantBlob == "" {
				if tc.data != "" && tc.wantKind != store.KindScreenshot && e.Data != tc.data {
					t.Errorf("data changed: %s", e.Data)
				}
				return
			}
			// The bytes moved to the blob store; the payload names them.
			var obj map[string]any
			if err := json.Unmarshal([]byte(e.Data), &obj); err != nil {
				t.Fatal(err)
			}
			if _, ok := obj["data"]; ok || obj["blobHash"] != tc.wantBlob || (tc.typ == "agent.screenshot.v1" && obj["width"] != 2.0) || obj["@type"] == nil {
				t.Fatalf("payload %s", e.Data)
			}
			got, err := blobs.Get(context.Background(), tc.wantBlob)
			if err != nil || string(got) != string(png) {
				t.Fatalf("blob %q, %v", got, err)
			}
			// Inline puts the bytes back; Prepare again takes them out again.
			in := e
			if err := payload.Inline(context.Background(), &in, blobs); err != nil {
				t.Fatal(err)
			}
			var obj2 map[string]any
			json.Unmarshal([]byte(in.Data), &obj2)
			if obj2["data"] == nil {
				t.Fatalf("inline payload %s", in.Data)
			}
			again := store.Entry{ID: "e2", Type: tc.typ, Data: in.Data}
			if err := payload.Prepare(context.Background(), &again, blobs); err != nil || again.BlobHash != tc.wantBlob || again.Data != e.Data {
				t.Fatalf("prepare after inline: %+v, %v", again, err)
			}
		})
	}
}

func TestPrepareWithoutBlobStoreKeepsBytes(t *testing.T) {
	data := anyJSON(t, &historyv1.AgentScreenshot{Data: []byte("img")})
	e := store.Entry{ID: "e", Type: "agent.screenshot.v1", Data: data}
	if err := payload.Prepare(context.Background(), &e, nil); err != nil {
		t.Fatal(err)
	}
	if e.Data != data || e.BlobHash != "" {
		t.Fatalf("%+v", e)
	}
}
