package history_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	"github.com/deskgrid/deskgrid/services/history"
	"github.com/deskgrid/deskgrid/services/history/internal/storetest"
	"github.com/deskgrid/deskgrid/services/platform/auth/authtest"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
	"github.com/deskgrid/deskgrid/services/platform/videostore"
)

func download(ctx context.Context, c historyv1.HistoryServiceClient, session, id string) (string, []byte, error) {
	st, err := c.DownloadRecording(ctx, &historyv1.DownloadRecordingRequest{SessionId: session, RecordingId: id})
	if err != nil {
		return "", nil, err
	}
	var ct string
	var data []byte
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return ct, data, nil
		}
		if err != nil {
			return "", nil, err
		}
		if ct == "" {
			ct = m.GetContentType()
		}
		data = append(data, m.GetChunk()...)
	}
}

// A recording's events become a recording the history lists; the video its
// end names moves from the object store into the blob store, downloads
// whole to its tenant only, and goes with the session's history.
func TestRecordingsFromEvents(t *testing.T) {
	e := newEnv(t)
	st := storetest.All[0].Open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := blobConfig(t)
	cfg.BlobGrace = time.Nanosecond
	cfg.SweepInterval = -1
	svc, err := history.New(ctx, cfg, history.Deps{Logger: testLogger(t), Store: st, JS: e.js, Tenancy: authtest.Tenancy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	c := client(t, svc)
	videos, err := videostore.Open(ctx, e.js)
	if err != nil {
		t.Fatal(err)
	}
	video := bytes.Repeat([]byte("not really a video, but bytes of one "), 30000) // > 1 MiB: several chunks
	if _, err := videos.Put(ctx, "rec-done", bytes.NewReader(video)); err != nil {
		t.Fatal(err)
	}
	pub := func(typ string, r *displayv1.Recording) {
		t.Helper()
		if _, err := e.pub.Publish(ctx, events.Meta{Type: typ, SessionID: "victim-sess", Tenant: "victim"}, r); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().Add(-time.Minute)
	rec := func(id string, state displayv1.RecordingState, start time.Time) *displayv1.Recording {
		return &displayv1.Recording{Id: id, SessionId: "victim-sess", State: state, Format: displayv1.RecordingFormat_RECORDING_FORMAT_MP4,
			Fps: 5, Width: 320, Height: 240, ContentType: "video/mp4", StartTime: timestamppb.New(start)}
	}
	pub(events.TypeRecordingStarted, rec("rec-done", displayv1.RecordingState_RECORDING_STATE_RECORDING, t0))
	done := rec("rec-done", displayv1.RecordingState_RECORDING_STATE_STOPPED, t0)
	done.Object, done.SizeBytes, done.Frames, done.EndTime = "rec-done", int64(len(video)), 12, timestamppb.Now()
	pub(events.TypeRecordingStopped, done)
	pub(events.TypeRecordingStarted, rec("rec-failed", displayv1.RecordingState_RECORDING_STATE_RECORDING, t0.Add(time.Second)))
	failed := rec("rec-failed", displayv1.RecordingState_RECORDING_STATE_FAILED, t0.Add(time.Second))
	failed.FailureReason = "the node's disk for recordings is full"
	pub(events.TypeRecordingFailed, failed)
	pub(events.TypeRecordingStarted, rec("rec-live", displayv1.RecordingState_RECORDING_STATE_RECORDING, t0.Add(2*time.Second)))

	victim, attacker := authtest.As(context.Background(), authtest.Victim), authtest.As(context.Background(), authtest.Attacker)
	var list []*displayv1.Recording
	testkit.Eventually(t, 20*time.Second, func() bool {
		resp, err := c.ListRecordings(victim, &historyv1.ListRecordingsRequest{SessionId: "victim-sess"})
		list = resp.GetRecordings()
		return err == nil && len(list) == 3 && list[2].GetDownloadReady()
	}, "three recordings, one downloadable")
	if list[0].GetId() != "rec-live" || list[0].GetState() != displayv1.RecordingState_RECORDING_STATE_RECORDING ||
		list[1].GetId() != "rec-failed" || list[1].GetState() != displayv1.RecordingState_RECORDING_STATE_FAILED || list[1].GetFailureReason() == "" ||
		list[2].GetId() != "rec-done" || list[2].GetState() != displayv1.RecordingState_RECORDING_STATE_STOPPED || list[2].GetFrames() != 12 || list[2].GetObject() != "" {
		t.Fatalf("recordings, newest first: %v", list)
	}
	ct, got, err := download(victim, c, "victim-sess", "rec-done")
	if err != nil || ct != "video/mp4" || !bytes.Equal(got, video) {
		t.Fatalf("download: %q, %d bytes (want %d), %v", ct, len(got), len(video), err)
	}
	if _, err := videos.Get(ctx, "rec-done"); !errors.Is(err, videostore.ErrNotFound) {
		t.Fatalf("the video is still in the object store: %v", err)
	}
	for id, code := range map[string]codes.Code{"rec-live": codes.FailedPrecondition, "rec-failed": codes.FailedPrecondition, "rec-none": codes.NotFound} {
		if _, _, err := download(victim, c, "victim-sess", id); status.Code(err) != code {
			t.Errorf("download %s: %v, want %v", id, err, code)
		}
	}
	if _, _, err := download(victim, c, "victim-sess", "rec-failed"); !strings.Contains(status.Convert(err).Message(), "full") {
		t.Errorf("a failed recording's download does not say why: %v", err)
	}
	// Another tenant finds nothing: the same answers as for no session.
	for name, call := range map[string]func(ctx context.Context, session string) error{
		"list": func(ctx context.Context, s string) error {
			_, err := c.ListRecordings(ctx, &historyv1.ListRecordingsRequest{SessionId: s})
			return err
		},
		"get": func(ctx context.Context, s string) error {
			_, err := c.GetRecording(ctx, &historyv1.GetRecordingRequest{SessionId: s, RecordingId: "rec-done"})
			return err
		},
		"download": func(ctx context.Context, s string) error {
			_, _, err := download(ctx, c, s, "rec-done")
			return err
		},
	} {
		got, unknown := call(attacker, "victim-sess"), call(attacker, "no-such-sess")
		if status.Code(got) != codes.NotFound || status.Code(unknown) != codes.NotFound {
			t.Errorf("another tenant's %s: %v (no session: %v), want NotFound", name, got, unknown)
		}
	}
	// The recordings go with the session's history, and the video with
	// the next sweep.
	if _, err := c.DeleteSessionHistory(victim, &historyv1.DeleteSessionHistoryRequest{SessionId: "victim-sess"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListRecordings(victim, &historyv1.ListRecordingsRequest{SessionId: "victim-sess"}); status.Code(err) != codes.NotFound {
		t.Fatalf("recordings after the history's delete: %v", err)
	}
	if _, err := svc.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetBlob(victim, &historyv1.GetBlobRequest{Hash: list[2].GetBlobHash()}); status.Code(err) != codes.NotFound {
		t.Fatalf("the video's blob after the sweep: %v, want NotFound", err)
	}
}
