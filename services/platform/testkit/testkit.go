// Package testkit holds the small helpers the tests of every deskgrid module
// share. It imports only the standard library, so any module's tests can use
// it without pulling a dependency.
package testkit

import (
	"testing"
	"time"
)

// Poll is how often Eventually checks its condition.
const Poll = 10 * time.Millisecond

// Eventually calls cond every Poll until it returns true, and fails the test
// with "timed out after <timeout> waiting for <what>" once timeout has passed
// without it holding. cond runs at least once, in the calling goroutine.
func Eventually(tb testing.TB, timeout time.Duration, cond func() bool, what string) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(Poll)
	}
}
