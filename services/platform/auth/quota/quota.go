// Package quota checks a tenant's resource use against its limits before
// more is granted: sessions, CPU and memory. The session service keeps the
// usage (it owns the records); this package only decides, so the rule and
// its message are the same everywhere.
package quota

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrExceeded: granting the request would go over a limit.
var ErrExceeded = errors.New("quota exceeded")

// Amount is a quantity of the limited resources. As Limits, a zero field
// means no limit.
type Amount struct {
	Sessions    int64
	CPUMillis   int64
	MemoryBytes int64
}

// Add returns a + b.
func (a Amount) Add(b Amount) Amount {
	return Amount{a.Sessions + b.Sessions, a.CPUMillis + b.CPUMillis, a.MemoryBytes + b.MemoryBytes}
}

// ExceededError names the limit a request would pass.
type ExceededError struct {
	Resource string // "sessions", "cpu_millis" or "memory_bytes"
	Limit    int64
	Used     int64
	Asked    int64
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("quota exceeded: %s limit is %d, %d in use, %d more asked; end or suspend sessions, or ask for a higher quota", e.Resource, e.Limit, e.Used, e.Asked)
}

// Unwrap makes errors.Is(err, ErrExceeded) true.
func (e *ExceededError) Unwrap() error { return ErrExceeded }

// GRPCStatus maps the error to ResourceExhausted at a handler edge.
func (e *ExceededError) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, e.Error())
}

// Admit reports whether used + asked stays within limits, naming the first
// limit it would pass.
func Admit(limits, used, asked Amount) error {
	for _, c := range []struct {
		name               string
		limit, used, asked int64
	}{
		{"sessions", limits.Sessions, used.Sessions, asked.Sessions},
		{"cpu_millis", limits.CPUMillis, used.CPUMillis, asked.CPUMillis},
		{"memory_bytes", limits.MemoryBytes, used.MemoryBytes, asked.MemoryBytes},
	} {
		if c.limit > 0 && c.asked > 0 && c.used+c.asked > c.limit {
			return &ExceededError{Resource: c.name, Limit: c.limit, Used: c.used, Asked: c.asked}
		}
	}
	return nil
}
