package main

import (
	"google.golang.org/grpc"

	"bufio"
	"context"
	"github.com/deskgrid/deskgrid/services/platform/auth"
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
	// cold: every create starts its X server; warm: one is kept started.
	b.Run("cold", func(b *testing.B) { benchCreate(b, "-warm-displays", "0") })
	b.Run("warm", func(b *testing.B) { benchCreate(b, "-warm-displays", "1") })
}

func benchCreate(b *testing.B, flags ...string) {
	p := startUp(b, b.TempDir(), b.TempDir(), flags...)
	conn, err := dial(p.grpc, grpc.WithPerRPCCredentials(auth.KeyCredentials(p.key)))
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
	b.ReportMetric(float64(privateBytes(b, idle.GetXDisplay()))/(1<<20), "idle-private-MB")
}

// privateBytes is the Private_Clean + Private_Dirty of a session's X server,
// found through the pid its display's X lock file holds.
func privateBytes(b *testing.B, xDisplay string) int64 {
	lock, err := os.ReadFile("/tmp/.X" + strings.TrimPrefix(xDisplay, ":") + "-lock")
	if err != nil {
		b.Fatalf("X lock file of %s: %v", xDisplay, err)
	}
	pid := strings.TrimSpace(string(lock))
	sm, err := os.Open(filepath.Join("/proc", pid, "smaps_rollup"))
	if err != nil {
		b.Fatalf("X server of %s: %v", xDisplay, err)
	}
	defer sm.Close()
	var total int64
	sc := bufio.NewScanner(sm)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && (fs[0] == "Private_Clean:" || fs[0] == "Private_Dirty:") {
			kb, _ := strconv.ParseInt(fs[1], 10, 64)
			total += kb << 10
		}
	}
	return total
}
