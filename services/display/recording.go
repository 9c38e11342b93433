package display

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/capture"
	"github.com/deskgrid/deskgrid/services/display/internal/record"
	"github.com/deskgrid/deskgrid/services/display/internal/scale"
	"github.com/deskgrid/deskgrid/services/platform/events"
)

// VideoSink takes a finished recording's video for the history
// (videostore.Store through NATS).
type VideoSink interface {
	Put(ctx context.Context, name string, r io.Reader) (int64, error)
}

const (
	defaultRecordingFPS = 5
	maxRecordingFPS     = 30
	minRecordingSide    = 16
	maxRecordingSide    = 1920
	// endedKept is how many ended recordings StopRecording still knows, so
	// stopping one twice says it has ended rather than that it never was.
	endedKept = 1024
)

var errRecordingOff = errors.New("recordings are not available on this node: it has no event bus (NATS)")

// recording is one running recording of a display.
type recording struct {
	id      string
	d       *display
	format  record.Format
	fps     int
	inW     int
	inH     int
	outW    int
	outH    int
	path    string
	started time.Time
	enc     *record.Encoder
	// running is closed once enc is set.
	running chan struct{}

	stopOnce sync.Once
	stop     chan struct{}
	// failing is set when the recording ends by itself (ffmpeg exited, the
	// disk filled): a stop after it finds it ended.
	failing atomic.Bool
	// done is closed once the recording has ended and been announced;
	// result is its final state.
	done   chan struct{}
	result *displayv1.Recording
}

func (r *recording) requestStop() { r.stopOnce.Do(func() { close(r.stop) }) }

func (r *recording) proto(state displayv1.RecordingState) *displayv1.Recording {
	f := displayv1.RecordingFormat_RECORDING_FORMAT_MP4
	if r.format == record.WebM {
		f = displayv1.RecordingFormat_RECORDING_FORMAT_WEBM
	}
	return &displayv1.Recording{
		Id:          r.id,
		SessionId:   r.d.sessionID,
		State:       state,
		Format:      f,
		Fps:         int32(r.fps),
		Width:       int32(r.outW),
		Height:      int32(r.outH),
		StartTime:   timestamppb.New(r.started),
		ContentType: r.format.ContentType(),
	}
}

// recordingSpec is a validated StartRecording.
type recordingSpec struct {
	format     record.Format
	fps        int
	outW, outH int
}

func validateRecording(req *displayv1.StartRecordingRequest) (recordingSpec, error) {
	spec := recordingSpec{fps: int(req.GetFps())}
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return spec, err
	}
	switch req.GetFormat() {
	case displayv1.RecordingFormat_RECORDING_FORMAT_UNSPECIFIED, displayv1.RecordingFormat_RECORDING_FORMAT_MP4:
		spec.format = record.MP4
	case displayv1.RecordingFormat_RECORDING_FORMAT_WEBM:
		spec.format = record.WebM
	default:
		return spec, invalidf("format %d is not a recording format; use RECORDING_FORMAT_MP4 or RECORDING_FORMAT_WEBM", req.GetFormat())
	}
	switch {
	case spec.fps == 0:
		spec.fps = defaultRecordingFPS
	case spec.fps < 1 || spec.fps > maxRecordingFPS:
		return spec, invalidf("fps %d is outside 1-%d", spec.fps, maxRecordingFPS)
	}
	w, h := int(req.GetSize().GetWidth()), int(req.GetSize().GetHeight())
	if w != 0 || h != 0 {
		if w < minRecordingSide || w > maxRecordingSide || h < minRecordingSide || h > maxRecordingSide {
			return spec, invalidf("size %dx%d is outside %d-%d on a side", w, h, minRecordingSide, maxRecordingSide)
		}
		spec.outW, spec.outH = w&^1, h&^1
	}
	return spec, nil
}

func newRecordingID() string {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
	var b [20]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "rec-" + string(b[:])
}

func validRecordingID(id string) bool {
	if !strings.HasPrefix(id, "rec-") || len(id) > 64 {
		return false
	}
	for _, r := range id[4:] {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return len(id) > 4
}

// StartRecording starts recording a session's screen.
func (s *Service) StartRecording(ctx context.Context, req *displayv1.StartRecordingRequest) (*displayv1.StartRecordingResponse, error) {
	spec, err := validateRecording(req)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	d, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if s.videos == nil || s.events == nil {
		return nil, s.toStatus(ctx, errRecordingOff)
	}
	r, err := s.startRecording(ctx, d, spec)
	if err != nil {
		return nil, s.toStatus(ctx, d.explain(err))
	}
	return &displayv1.StartRecordingResponse{Recording: r}, nil
}

func (s *Service) startRecording(ctx context.Context, d *display, spec recordingSpec) (*displayv1.Recording, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	s.recMu.Lock()
	if cur, ok := s.recordings[d.sessionID]; ok {
		s.recMu.Unlock()
		return nil, fmt.Errorf("session %s is already being recorded (%s); stop that recording first: %w", d.sessionID, cur.id, errAlreadyExists)
	}
	if d.stopping.Load() {
		s.recMu.Unlock()
		return nil, fmt.Errorf("the display of session %s was deleted: %w", d.sessionID, errNotFound)
	}
	r := &recording{id: newRecordingID(), d: d, format: spec.format, fps: spec.fps, stop: make(chan struct{}), done: make(chan struct{}), running: make(chan struct{})}
	// Held while it starts, so a second start sees it.
	s.recordings[d.sessionID] = r
	s.recMu.Unlock()
	ok := false
	defer func() {
		if !ok {
			s.recMu.Lock()
			delete(s.recordings, d.sessionID)
			s.recMu.Unlock()
			close(r.done)
		}
	}()

	d.shotMu.Lock()
	d.followSize()
	screen := d.screen
	d.shotMu.Unlock()
	r.inW, r.inH = screen.Width, screen.Height
	r.outW, r.outH = spec.outW, spec.outH
	if r.outW == 0 {
		r.outW, r.outH = scale.Fit(r.inW, r.inH, maxRecordingSide, maxRecordingSide)
		r.outW, r.outH = max(2, r.outW&^1), max(2, r.outH&^1)
	}
	pix := "rgba"
	if screen.BGRX() {
		pix = "bgr0"
	}
	dir := filepath.Join(s.cfg.RecordingDir, d.sessionID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("recording dir: %w", err)
	}
	r.path = filepath.Join(dir, r.id+r.format.Ext())
	if err := s.checkRecordingSpace(); err != nil {
		return nil, err
	}
	enc, err := record.Start(record.Options{
		FFmpeg: s.cfg.FFmpegPath, Format: r.format, PixFmt: pix,
		InWidth: r.inW, InHeight: r.inH, OutWidth: r.outW, OutHeight: r.outH, FPS: r.fps, Path: r.path,
	})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("cannot record: the node has no ffmpeg (%s): %w", s.cfg.FFmpegPath, errGone)
		}
		return nil, err
	}
	r.enc = enc
	close(r.running)
	r.started = time.Now()
	started := r.proto(displayv1.RecordingState_RECORDING_STATE_RECORDING)
	// Beside the video, so a node whose process dies while recording
	// still hands the video over and says so when it starts again.
	if err := writeRecordingMeta(r.path, d.tenant, started); err != nil {
		enc.Kill()
		_ = os.Remove(r.path)
		return nil, err
	}
	if _, err := s.events.Publish(ctx, events.Meta{Type: events.TypeRecordingStarted, SessionID: d.sessionID, Tenant: d.tenant}, started); err != nil {
		enc.Kill()
		_ = os.Remove(r.path)
		_ = os.Remove(r.path + metaExt)
		return nil, fmt.Errorf("announce the recording: %w: %w", err, errClosed)
	}
	ok = true
	s.log.InfoContext(ctx, "recording started", "session_id", d.sessionID, "recording_id", r.id,
		"format", r.format.Ext(), "fps", r.fps, "width", r.outW, "height", r.outH, "ffmpeg_pid", enc.PID())
	go s.runRecording(r)
	return started, nil
}

// checkRecordingSpace refuses to go on when the recordings' disk is nearly
// full, so a recording ends with a reason before ffmpeg fails to write.
func (s *Service) checkRecordingSpace() error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.cfg.RecordingDir, &st); err != nil {
		return fmt.Errorf("recording dir: %w", err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free < s.cfg.RecordingMinFree {
		return fmt.Errorf("the node's disk for recordings is full (%d MiB free, %d MiB needed): %w",
			free>>20, s.cfg.RecordingMinFree>>20, errDiskFull)
	}
	return nil
}

// runRecording feeds ffmpeg a frame whenever the screen has changed, at
// most fps a second, until the recording is stopped or fails; then it
// finalises the video, hands it to the history and announces the end.
func (s *Service) runRecording(r *recording) {
	d := r.d
	buf := make([]byte, 4*r.inW*r.inH)
	interval := time.Second / time.Duration(r.fps)
	var last time.Time
	var failure error
	lastSpaceCheck := time.Now()
	for {
		_, changed := d.watch.Snapshot()
		if err := s.grabInto(d, buf, r.inW, r.inH); err != nil {
			// The X server is gone (the session ended): what was recorded
			// is the whole recording.
			break
		}
		if err := r.enc.Write(buf); err != nil {
			failure = err
			break
		}
		last = time.Now()
		if time.Since(lastSpaceCheck) > time.Second {
			lastSpaceCheck = time.Now()
			if err := s.checkRecordingSpace(); err != nil {
				failure = err
				break
			}
		}
		stopped := false
		select {
		case <-changed:
		case <-r.stop:
			stopped = true
		case <-r.enc.Exited():
			failure = r.enc.Err()
		}
		if stopped || failure != nil {
			if stopped {
				// One last frame, so the video lasts until the stop.
				if err := s.grabInto(d, buf, r.inW, r.inH); err == nil {
					if err := r.enc.Write(buf); err != nil {
						failure = err
					}
				}
			}
			break
		}
		if wait := interval - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.stop:
			}
			t.Stop()
		}
	}
	if failure != nil {
		r.failing.Store(true)
	}
	if err := r.enc.Finish(s.cfg.RecordingFinishTimeout); err != nil && failure == nil {
		failure = err
	}
	s.endRecording(r, failure)
}

// endRecording hands the video over and announces how the recording ended.
func (s *Service) endRecording(r *recording, failure error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d := r.d
	out := r.proto(displayv1.RecordingState_RECORDING_STATE_STOPPED)
	out.Frames = r.enc.Frames()
	s.handOver(ctx, d.tenant, r.path, out, failure)
	_ = os.Remove(r.path)
	_ = os.Remove(r.path + metaExt)
	_ = os.Remove(filepath.Dir(r.path)) // only when empty
	r.result = proto.Clone(out).(*displayv1.Recording)
	s.recMu.Lock()
	if s.recordings[d.sessionID] == r {
		delete(s.recordings, d.sessionID)
	}
	if len(s.ended) >= endedKept {
		for k := range s.ended {
			delete(s.ended, k)
			break
		}
	}
	s.ended[r.id] = r.result
	s.recMu.Unlock()
	close(r.done)
}

// grabInto copies the whole screen into buf, w x h pixels of 4 bytes; a
// screen resized since the recording started is cut or padded to that size.
func (s *Service) grabInto(d *display, buf []byte, w, h int) error {
	if err := d.usable(); err != nil {
		return err
	}
	if d.stopping.Load() {
		return errNotFound
	}
	d.shotMu.Lock()
	defer d.shotMu.Unlock()
	d.followSize()
	d.ensureShared(s.log)
	rect := capture.Rect{Width: d.screen.Width, Height: d.screen.Height}
	f, err := d.grab(rect)
	if err != nil {
		return d.explain(err)
	}
	src, stride := f.Data(), 4*f.Width()
	if !d.screen.BGRX() {
		img, err := f.RGBA()
		if err != nil {
			return err
		}
		src, stride = img.Pix, img.Stride
	}
	if f.Width() != w || f.Height() != h {
		clear(buf)
	}
	row := 4 * min(w, f.Width())
	for y := range min(h, f.Height()) {
		copy(buf[y*4*w:y*4*w+row], src[y*stride:y*stride+row])
	}
	// X draws the pointer outside the framebuffer: the video shows it
	// where it is, with its shape, at each frame. A cursor that cannot be
	// read leaves the frame without it rather than ending the recording.
	if d.cursorOK {
		if cur, err := capture.CursorOf(d.conn); err == nil {
			cur.DrawPixels(buf, w, h, d.screen.BGRX())
		}
	}
	return nil
}

// StopRecording ends a session's recording.
func (s *Service) StopRecording(ctx context.Context, req *displayv1.StopRecordingRequest) (*displayv1.StopRecordingResponse, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	id := req.GetRecordingId()
	if !validRecordingID(id) {
		return nil, s.toStatus(ctx, invalidf("recording_id %q is not a recording id (rec-...)", id))
	}
	d, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	s.recMu.Lock()
	r, ok := s.recordings[d.sessionID]
	ended, wasEnded := s.ended[id]
	s.recMu.Unlock()
	if !ok || r.id != id {
		if wasEnded && ended.GetSessionId() == d.sessionID {
			return nil, s.toStatus(ctx, fmt.Errorf("recording %s of session %s has already ended (%s): %w",
				id, d.sessionID, strings.ToLower(strings.TrimPrefix(ended.GetState().String(), "RECORDING_STATE_")), errEnded))
		}
		return nil, s.toStatus(ctx, fmt.Errorf("session %s has no recording %s: %w", d.sessionID, id, errNotFound))
	}
	failedBefore := r.failing.Load()
	r.requestStop()
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, s.toStatus(ctx, ctx.Err())
	}
	if failedBefore && r.result != nil {
		return nil, s.toStatus(ctx, fmt.Errorf("recording %s of session %s has already ended (failed: %s): %w",
			id, d.sessionID, r.result.GetFailureReason(), errEnded))
	}
	if r.result == nil {
		return nil, s.toStatus(ctx, fmt.Errorf("session %s has no recording %s: %w", d.sessionID, id, errNotFound))
	}
	return &displayv1.StopRecordingResponse{Recording: proto.Clone(r.result).(*displayv1.Recording)}, nil
}

// stopRecording ends d's recording, if any, and waits until its video is
// finalised and handed over: a display being deleted is still there to
// give the last frame.
func (s *Service) stopRecording(ctx context.Context, d *display) {
	s.recMu.Lock()
	r, ok := s.recordings[d.sessionID]
	s.recMu.Unlock()
	if !ok || r.d != d {
		return
	}
	r.requestStop()
	select {
	case <-r.done:
	case <-ctx.Done():
		// The caller cannot wait: ffmpeg is killed, and the recording
		// still ends with its event.
		select {
		case <-r.running:
			r.enc.Kill()
		default:
		}
	}
}

// handOver puts a finished recording's video (path) in the object store for
// the history and publishes its end: stopped, or failed with the reason. A
// recording never ends silently.
func (s *Service) handOver(ctx context.Context, tenant, path string, out *displayv1.Recording, failure error) {
	out.EndTime = timestamppb.Now()
	if info, err := os.Stat(path); err == nil && info.Size() > 0 {
		if f, err := os.Open(path); err == nil {
			n, err := s.videos.Put(ctx, out.GetId(), f)
			f.Close()
			if err == nil {
				out.SizeBytes, out.Object = n, out.GetId()
			} else if failure == nil {
				failure = fmt.Errorf("hand the video to the history: %w", err)
			}
		}
	} else if failure == nil {
		failure = errors.New("ffmpeg wrote no video")
	}
	typ := events.TypeRecordingStopped
	if failure != nil {
		typ = events.TypeRecordingFailed
		out.State = displayv1.RecordingState_RECORDING_STATE_FAILED
		out.FailureReason = failure.Error()
		s.log.Warn("recording failed", "session_id", out.GetSessionId(), "recording_id", out.GetId(), "err", failure)
	} else {
		s.log.Info("recording stopped", "session_id", out.GetSessionId(), "recording_id", out.GetId(), "frames", out.GetFrames(), "bytes", out.GetSizeBytes())
	}
	for attempt := 0; ; attempt++ {
		_, err := s.events.Publish(ctx, events.Meta{Type: typ, SessionID: out.GetSessionId(), Tenant: tenant}, out)
		if err == nil {
			return
		}
		if attempt == 4 || ctx.Err() != nil {
			s.log.Error("announcing the end of a recording", "session_id", out.GetSessionId(), "recording_id", out.GetId(), "err", err)
			return
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
}

// metaExt names the record written beside a video while it is recorded.
const metaExt = ".json"

// recordingMeta is what a later process needs to end a recording whose
// process died.
type recordingMeta struct {
	Tenant    string          `json:"tenant"`
	Recording json.RawMessage `json:"recording"`
}

func writeRecordingMeta(videoPath, tenant string, r *displayv1.Recording) error {
	rb, err := protojson.Marshal(r)
	if err != nil {
		return fmt.Errorf("recording meta: %w", err)
	}
	b, err := json.Marshal(recordingMeta{Tenant: tenant, Recording: rb})
	if err != nil {
		return fmt.Errorf("recording meta: %w", err)
	}
	if err := os.WriteFile(videoPath+metaExt, b, 0o600); err != nil {
		return fmt.Errorf("recording meta: %w", err)
	}
	return nil
}

// RecoverRecordings ends the recordings a previous process of this node
// left behind when it died (its ffmpeg died with it): each video so far
// (its last fragment at most a second short) is handed to the history and
// the recording is announced as failed with the reason. It returns how many
// it ended. Call it at start, before sessions are created.
func (s *Service) RecoverRecordings(ctx context.Context) (int, error) {
	if s.videos == nil || s.events == nil {
		return 0, nil
	}
	metas, err := filepath.Glob(filepath.Join(s.cfg.RecordingDir, "*", "rec-*"+metaExt))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, mp := range metas {
		video := strings.TrimSuffix(mp, metaExt)
		b, err := os.ReadFile(mp)
		var m recordingMeta
		rec := &displayv1.Recording{}
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err == nil {
			err = protojson.Unmarshal(m.Recording, rec)
		}
		if err != nil || !validRecordingID(rec.GetId()) || validateSessionID(rec.GetSessionId()) != nil {
			s.log.Warn("removing an unreadable recording left by a previous run", "file", mp, "err", err)
		} else {
			s.handOver(ctx, m.Tenant, video, rec, errors.New("the node's process ended while recording"))
			n++
		}
		_ = os.Remove(video)
		_ = os.Remove(mp)
		_ = os.Remove(filepath.Dir(mp))
	}
	return n, nil
}
