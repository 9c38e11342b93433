package record

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Frames sent a few milliseconds apart are all in the video: none is
// dropped for sharing a time stamp with the one before. (Frames larger than
// a pipe's buffer, as a screen's are: ffmpeg reads each as it is written.)
func TestFramesCloseTogetherAreKept(t *testing.T) {
	for _, f := range []Format{MP4, WebM} {
		path := filepath.Join(t.TempDir(), "v"+f.Ext())
		e, err := Start(Options{Format: f, PixFmt: "bgr0", InWidth: 320, InHeight: 240, OutWidth: 320, OutHeight: 240, FPS: 30, Path: path})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			frame := make([]byte, 320*240*4)
			for j := range frame {
				frame[j] = byte(i * 40)
			}
			if err := e.Write(frame); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := e.Finish(time.Minute); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
			"-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", path).Output()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(out)); got != "6" {
			t.Errorf("%s: %s frames in the video, want the 6 sent", f.Ext(), got)
		}
	}
}
