package main

import (
	"bufio"
	"context"
	"google.golang.org/protobuf/proto"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// BenchmarkSessionCreateToFirstScreenshot measures, through the whole stack
// of `deskgrid up` over gRPC, the time from CreateSession to the session
// answering (CreateSession returns once the desktop answered a screenshot),
// and the private memory of one idle session's processes.
func BenchmarkSessionCreateToFirstScreenshot(b *testing.B) {
	p := startUp(b, b.TempDir(), b.TempDir())
	conn, err := dial(p.grpc)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := sessionv1.NewSessionServiceClient(conn)
	ctx := context.Background()
	create := func() (*sessionv1.Session, time.Duration) {
		start := time.Now()
		resp, err := client.CreateSession(ctx, &sessionv1.CreateSessionRequest{Display: &sessionv1.DisplaySpec{Width: proto.Int32(1280), Height: proto.Int32(800)}})
		if err != nil {
			b.Fatal(err)
		}
		return resp.GetSession(), time.Since(start)
	}
	// One untimed session warms caches and is measured for memory once idle.
	idle, _ := create()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, d := create()
		lat = append(lat, d)
		b.StopTimer()
		if _, err := client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: s.GetId()}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
	time.Sleep(time.Second) // let the idle session settle before reading its memory
	b.ReportMetric(float64(privateBytes(b, idle.GetId()))/(1<<20), "idle-private-MB")
}

// privateBytes adds up Private_Clean and Private_Dirty of every process whose
// command line names the session (its X server's authority file path does).
func privateBytes(b *testing.B, sessionID string) int64 {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var total int64
	found := 0
	for _, f := range procs {
		cmd, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(cmd), sessionID) {
			continue
		}
		found++
		sm, err := os.Open(filepath.Join(filepath.Dir(f), "smaps_rollup"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(sm)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) >= 2 && (fs[0] == "Private_Clean:" || fs[0] == "Private_Dirty:") {
				kb, _ := strconv.ParseInt(fs[1], 10, 64)
				total += kb << 10
			}
		}
		sm.Close()
	}
	if found == 0 {
		b.Fatalf("no process of session %s found", sessionID)
	}
	return total
}
