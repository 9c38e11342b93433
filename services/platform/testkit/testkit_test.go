package testkit_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// recorder is a testing.TB whose Fatalf records the message and stops the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls Eventually in its own goroutine, so a Fatalf ends only that.
func run(timeout time.Duration, cond func() bool, what string) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testkit.Eventually(r, timeout, cond, what)
	}()
	<-done
	return r.failed
}

func TestEventuallyReturnsOnceConditionHolds(t *testing.T) {
	var calls atomic.Int32
	msg := run(time.Minute, func() bool { return calls.Add(1) >= 3 }, "third call")
	if msg != "" {
		t.Fatalf("failed although the condition held: %q", msg)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("condition called %d times, want 3 (stop at the first true)", n)
	}
}

func TestEventuallyFailsAtDeadlineNamingTheWait(t *testing.T) {
	var calls atomic.Int32
	msg := run(50*time.Millisecond, func() bool { calls.Add(1); return false }, "the moon")
	if msg != "timed out after 50ms waiting for the moon" {
		t.Fatalf("failure message %q", msg)
	}
	if calls.Load() < 2 {
		t.Fatalf("condition polled %d times before failing, want several", calls.Load())
	}
}
