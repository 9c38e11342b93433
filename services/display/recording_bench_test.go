package display

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// BenchmarkRecordingCPU measures what recording a 1280x800 screen costs, as
// CPU per second of recording (percent of one core): ffmpeg's, the X
// server's and this process's (the display service grabbing frames), on a
// still screen and on a busy one (many rectangles redrawn 30 times a
// second, every frame a change). Each iteration is one second.
//
//	go test -run '^$' -bench RecordingCPU -benchtime 10x ./services/display
func BenchmarkRecordingCPU(b *testing.B) {
	for _, bc := range []struct {
		name string
		busy bool
		fps  int32
	}{
		{"idle/fps5", false, 5},
		{"busy/fps5", true, 5},
		{"busy/fps30", true, 30},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := newRecorderB(b)
			const sid = "rec-bench"
			createDisplay(b, r.c, sid, 1280, 800)
			stop := make(chan struct{})
			done := make(chan struct{})
			if bc.busy {
				xc := clientConn(b, r.s, sid)
				win := showWindow(b, xc, 0, 0, 1280, 800, 0xffffff, 0)
				gc, err := xproto.NewGcontextId(xc)
				if err != nil {
					b.Fatal(err)
				}
				if err := xproto.CreateGCChecked(xc, gc, xproto.Drawable(win), 0, nil).Check(); err != nil {
					b.Fatal(err)
				}
				go func() {
					defer close(done)
					t := time.NewTicker(time.Second / 30)
					defer t.Stop()
					rects := make([]xproto.Rectangle, 40)
					for {
						select {
						case <-stop:
							return
						case <-t.C:
						}
						for i := range rects {
							rects[i] = xproto.Rectangle{X: int16(rand.IntN(1200)), Y: int16(rand.IntN(740)), Width: uint16(20 + rand.IntN(200)), Height: uint16(10 + rand.IntN(60))}
						}
						xproto.ChangeGC(xc, gc, xproto.GcForeground, []uint32{rand.Uint32() & 0xffffff})
						xproto.PolyFillRectangle(xc, xproto.Drawable(win), gc, rects)
						xproto.GetInputFocus(xc).Reply() // a round trip: the drawing is done
					}
				}()
			} else {
				close(done)
			}
			defer func() { close(stop); <-done }()
			ctx := ctxT(b)
			start, err := r.c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: sid, Fps: bc.fps})
			if err != nil {
				b.Fatal(err)
			}
			rec := r.running(sid)
			ff, xs := rec.enc.PID(), rec.d.server.PID
			// Past ffmpeg's start.
			time.Sleep(time.Second)
			ff0, xs0, self0, frames0 := procTicks(b, ff), procTicks(b, xs), selfTicks(), rec.enc.Frames()
			began := time.Now()
			b.ResetTimer()
			for range b.N {
				time.Sleep(time.Second)
			}
			b.StopTimer()
			secs := time.Since(began).Seconds()
			pct := func(ticks int64) float64 { return float64(ticks) / 100 / secs * 100 }
			b.ReportMetric(pct(procTicks(b, ff)-ff0), "ffmpeg-cpu-%")
			b.ReportMetric(pct(procTicks(b, xs)-xs0), "xserver-cpu-%")
			b.ReportMetric(pct(selfTicks()-self0), "node-cpu-%")
			b.ReportMetric(float64(rec.enc.Frames()-frames0)/secs, "frames/s")
			b.ReportMetric(0, "ns/op")
			if _, err := r.c.StopRecording(ctx, &displayv1.StopRecordingRequest{SessionId: sid, RecordingId: start.GetRecording().GetId()}); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// selfTicks is this process's CPU time in clock ticks (100 a second).
func selfTicks() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	us := ru.Utime.Sec*1e6 + ru.Utime.Usec + ru.Stime.Sec*1e6 + ru.Stime.Usec
	return us / 1e4
}
