package ingest

import (
	"encoding/json"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestPayloadJSON(t *testing.T) {
	tests := []struct {
		name      string
		payload   *anypb.Any
		wantRunID string
		// wantFields are top-level fields the JSON must hold.
		wantFields map[string]any
	}{
		{"no payload", nil, "", nil},
		{
			"known event",
			mustAny(t, &eventsv1.SessionStateChanged{To: sessionv1.SessionState_SESSION_STATE_RUNNING, Reason: "ready"}),
			"",
			map[string]any{"@type": "type.googleapis.com/deskgrid.events.v1.SessionStateChanged", "to": "SESSION_STATE_RUNNING", "reason": "ready"},
		},
		{
			"message with a run id",
			mustAny(t, &agentv1.CancelRunRequest{RunId: "run-7"}),
			"run-7",
			map[string]any{"runId": "run-7"},
		},
		{
			"well-known type",
			mustAny(t, structpb.NewStringValue("hi")),
			"",
			map[string]any{"@type": "type.googleapis.com/google.protobuf.Value", "value": "hi"},
		},
		{
			"unknown type",
			&anypb.Any{TypeUrl: "type.googleapis.com/nobody.v1.Thing", Value: []byte{1, 2, 3}},
			"",
			map[string]any{"@type": "type.googleapis.com/nobody.v1.Thing", "value": "AQID"},
		},
		{
			"known type, broken bytes",
			&anypb.Any{TypeUrl: "type.googleapis.com/deskgrid.events.v1.SessionStateChanged", Value: []byte{0xff}},
			"",
			map[string]any{"@type": "type.googleapis.com/deskgrid.events.v1.SessionStateChanged", "value": "/w=="},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, runID := payloadJSON(tc.payload)
			if runID != tc.wantRunID {
				t.Errorf("run id %q; want %q", runID, tc.wantRunID)
			}
			if tc.wantFields == nil {
				if data != "" {
					t.Errorf("data %q; want none", data)
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(data), &got); err != nil {
				t.Fatalf("data %q is not a JSON object: %v", data, err)
			}
			for k, v := range tc.wantFields {
				if got[k] != v {
					t.Errorf("%s = %v; want %v (data %s)", k, got[k], v, data)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		ev   *eventsv1.Event
		ok   bool
	}{
		{"complete", &eventsv1.Event{Id: "1", Type: "t.v1", SessionId: "s"}, true},
		{"no tenant is fine", &eventsv1.Event{Id: "1", Type: "t.v1", SessionId: "s", Tenant: ""}, true},
		{"no id", &eventsv1.Event{Type: "t.v1", SessionId: "s"}, false},
		{"no type", &eventsv1.Event{Id: "1", SessionId: "s"}, false},
		{"no session", &eventsv1.Event{Id: "1", Type: "t.v1"}, false},
		{"NUL in tenant", &eventsv1.Event{Id: "1", Type: "t.v1", SessionId: "s", Tenant: "a\x00"}, false},
	}
	for _, tc := range tests {
		if err := validate(tc.ev); (err == nil) != tc.ok {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{BatchSize: 4000}.withDefaults()
	if c.Durable != "history" || c.BatchWait <= 0 || c.AckWait <= 0 || c.RetryDelay <= 0 {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c.MaxAckPending < 2*c.BatchSize {
		t.Errorf("MaxAckPending %d below two batches of %d", c.MaxAckPending, c.BatchSize)
	}
}

// TestAnyJSONMatchesProtojson checks the spliced form against protojson's
// own rendering of the Any.
func TestAnyJSONMatchesProtojson(t *testing.T) {
	for _, m := range []proto.Message{
		&eventsv1.SessionStateChanged{},
		&eventsv1.SessionStateChanged{Reason: "x", Session: &sessionv1.Session{Id: "s", Labels: map[string]string{"a": "b"}}},
		&agentv1.CancelRunRequest{RunId: "r"},
		structpb.NewNumberValue(3),
		&structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewBoolValue(true)}},
	} {
		a := mustAny(t, m)
		want, err := protojson.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := anyJSON(a.GetTypeUrl(), m)
		if !ok {
			t.Fatalf("%T: not rendered", m)
		}
		var g, w any
		if err := json.Unmarshal([]byte(got), &g); err != nil {
			t.Fatalf("%T: %s: %v", m, got, err)
		}
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%T:\n got %s\nwant %s", m, got, want)
		}
	}
}
