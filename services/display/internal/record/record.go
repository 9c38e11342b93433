// Package record encodes a display's frames into a video file with ffmpeg
// (Debian's, on the node). Frames are raw pixels written to ffmpeg's stdin
// only when the screen has changed, each stamped with the time ffmpeg reads
// it, and encoded at a variable frame rate: a still screen sends nothing and
// costs ffmpeg nothing, and the video still shows it for as long as it was
// still.
package record

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Format is a video's container and codec.
type Format int

const (
	// MP4 is H.264 in fragmented MP4: a file cut short by a crash still
	// plays up to its last fragment (a second at most).
	MP4 Format = iota
	// WebM is VP9 in WebM.
	WebM
)

// ContentType is the MIME type of a video of format f.
func (f Format) ContentType() string {
	if f == WebM {
		return "video/webm"
	}
	return "video/mp4"
}

// Ext is the file name extension of f, with its dot.
func (f Format) Ext() string {
	if f == WebM {
		return ".webm"
	}
	return ".mp4"
}

// Options describe one encoding.
type Options struct {
	// FFmpeg is the ffmpeg binary; "ffmpeg" from PATH when empty.
	FFmpeg string
	Format Format
	// PixFmt is ffmpeg's name of the frames' pixel layout: "bgr0" for the
	// xRGB little-endian pixels of a 24-bit X server, or "rgba".
	PixFmt string
	// InWidth, InHeight are the frames' size; OutWidth, OutHeight the
	// video's (even; ffmpeg scales when they differ).
	InWidth, InHeight   int
	OutWidth, OutHeight int
	// FPS is the most frames a second the caller sends; it sets the
	// distance of key frames.
	FPS int
	// Path is the video file written.
	Path string
}

// Args returns ffmpeg's command line for o, without the binary.
func Args(o Options) []string {
	gop := strconv.Itoa(max(10*o.FPS, 10))
	args := []string{
		"-hide_banner", "-nostdin", "-loglevel", "error",
		// Raw frames on stdin, each stamped with the time it was read: a
		// frame stands until the next one, however long that is.
		"-f", "rawvideo", "-pix_fmt", o.PixFmt,
		"-video_size", fmt.Sprintf("%dx%d", o.InWidth, o.InHeight),
		// The input's time base is one over its frame rate (25 when not
		// given): frames read within one tick of it get the same stamp,
		// and vfr drops all but the first, so the latest state of a quick
		// change was lost. Stamps to the millisecond keep every frame.
		"-framerate", "1000",
		"-use_wallclock_as_timestamps", "1",
		"-i", "pipe:0",
		"-an", "-fps_mode", "vfr",
	}
	vf := "format=yuv420p"
	if o.OutWidth != o.InWidth || o.OutHeight != o.InHeight {
		vf = fmt.Sprintf("scale=%d:%d:flags=bilinear,%s", o.OutWidth, o.OutHeight, vf)
	}
	args = append(args, "-vf", vf)
	switch o.Format {
	case WebM:
		args = append(args,
			"-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-row-mt", "1",
			"-b:v", "0", "-crf", "40", "-g", gop, "-f", "webm")
	default:
		args = append(args,
			"-c:v", "libx264", "-preset", "veryfast", "-tune", "stillimage,zerolatency", "-crf", "28", "-g", gop,
			// Fragments of at most a second: a video cut short (ffmpeg
			// killed, the disk full) plays up to its last second.
			"-movflags", "+empty_moov+default_base_moof", "-frag_duration", "1000000", "-f", "mp4")
	}
	// Each frame reaches the file as it is encoded, not when a buffer fills.
	return append(args, "-flush_packets", "1", "-y", o.Path)
}

// Encoder is one running ffmpeg.
type Encoder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tail
	exited chan struct{}
	// err is how ffmpeg exited; read after exited is closed.
	err error

	closeOnce sync.Once
	closeErr  error
	frames    atomic.Int64
	frameSize int
}

// Start starts ffmpeg. It runs in a process group of its own, and is
// killed if the node's process dies.
func Start(o Options) (*Encoder, error) {
	if o.InWidth <= 0 || o.InHeight <= 0 || o.OutWidth <= 0 || o.OutHeight <= 0 {
		return nil, fmt.Errorf("record: invalid size %dx%d -> %dx%d", o.InWidth, o.InHeight, o.OutWidth, o.OutHeight)
	}
	bin := o.FFmpeg
	if bin == "" {
		bin = "ffmpeg"
	}
	cmd := exec.Command(bin, Args(o)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	e := &Encoder{cmd: cmd, stdin: stdin, stderr: &tail{max: 4096}, exited: make(chan struct{}), frameSize: 4 * o.InWidth * o.InHeight}
	cmd.Stderr = e.stderr
	if err := cmd.Start(); err != nil {
		stdin.Close()
		return nil, fmt.Errorf("record: start %s: %w", bin, err)
	}
	go func() {
		err := cmd.Wait()
		if err != nil {
			if msg := e.stderr.String(); msg != "" {
				err = fmt.Errorf("ffmpeg %v: %s", err, msg)
			} else {
				err = fmt.Errorf("ffmpeg %w", err)
			}
		}
		e.err = err
		close(e.exited)
	}()
	return e, nil
}

// PID is ffmpeg's process id.
func (e *Encoder) PID() int { return e.cmd.Process.Pid }

// Write sends one frame of exactly InWidth*InHeight*4 bytes. It blocks
// while ffmpeg is busy, which holds the next frame back.
func (e *Encoder) Write(frame []byte) error {
	if len(frame) != e.frameSize {
		return fmt.Errorf("record: frame of %d bytes, want %d", len(frame), e.frameSize)
	}
	if _, err := e.stdin.Write(frame); err != nil {
		// A closed pipe means ffmpeg is exiting: its own words say why.
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
		select {
		case <-e.exited:
			return e.Err()
		case <-t.C:
			return fmt.Errorf("record: write frame: %w", err)
		}
	}
	e.frames.Add(1)
	return nil
}

// Frames is how many frames were written.
func (e *Encoder) Frames() int64 { return e.frames.Load() }

// Exited is closed when ffmpeg has exited.
func (e *Encoder) Exited() <-chan struct{} { return e.exited }

// Err is why ffmpeg exited, once it has; it is an error even for a clean
// exit the caller did not ask for.
func (e *Encoder) Err() error {
	if e.err != nil {
		return e.err
	}
	return errors.New("ffmpeg exited before the recording was stopped")
}

// Finish ends the input, so ffmpeg encodes what it holds, writes the end
// of the file and exits; after timeout it is killed. It returns ffmpeg's
// error, if any.
func (e *Encoder) Finish(timeout time.Duration) error {
	e.closeOnce.Do(func() {
		_ = e.stdin.Close()
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-e.exited:
			e.closeErr = e.err
		case <-t.C:
			e.Kill()
			<-e.exited
			e.closeErr = fmt.Errorf("ffmpeg did not finish the video within %s and was killed", timeout)
		}
	})
	return e.closeErr
}

// Kill ends ffmpeg at once and waits for it to be reaped.
func (e *Encoder) Kill() {
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	_ = e.stdin.Close()
	<-e.exited
}

// tail keeps the last max bytes written to it: ffmpeg's last words.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(bytes.ToValidUTF8(t.buf, nil))), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, "; ")
}
