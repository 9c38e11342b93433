package display

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procTicks is the CPU time (user + system, in clock ticks) pid has used.
func procTicks(tb testing.TB, pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}

// privateKB is pid's private memory (clean + dirty) in kB.
func privateKB(tb testing.TB, pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		tb.Fatal(err)
	}
	var kb int64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Private_Clean:") || strings.HasPrefix(line, "Private_Dirty:") {
			n, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			kb += n
		}
	}
	return kb
}

// BenchmarkIdleDisplays50 runs 50 idle desktops (X server with VNC) at once
// and reports the CPU their servers use over 5 s, as a percentage of one
// core, and their private memory each. Figures only; nothing is asserted.
func BenchmarkIdleDisplays50(b *testing.B) {
	s, c := testService(b, "")
	for i := range 50 {
		createDisplay(b, c, fmt.Sprintf("idle-%d", i), 1280, 800)
	}
	var pids []int
	for _, d := range s.list(context.Background()) {
		pids = append(pids, d.server.PID)
	}
	const window = 5 * time.Second
	b.ResetTimer()
	for range b.N {
		var before int64
		for _, p := range pids {
			before += procTicks(b, p)
		}
		time.Sleep(window)
		var after int64
		for _, p := range pids {
			after += procTicks(b, p)
		}
		// Clock ticks are 1/100 s on Linux.
		b.ReportMetric(float64(after-before)/100/window.Seconds()*100, "cpu-%-of-core")
	}
	var kb int64
	for _, p := range pids {
		kb += privateKB(b, p)
	}
	b.ReportMetric(float64(kb)/1024/50, "private-MB/display")
}
