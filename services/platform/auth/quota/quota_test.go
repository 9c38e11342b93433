package quota

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestAdmit(t *testing.T) {
	limits := Amount{Sessions: 3, CPUMillis: 4000, MemoryBytes: 8 << 30}
	cases := []struct {
		name     string
		limits   Amount
		used     Amount
		asked    Amount
		resource string
	}{
		{"fits", limits, Amount{1, 1000, 1 << 30}, Amount{1, 1000, 1 << 30}, ""},
		{"exactly full", limits, Amount{2, 3000, 7 << 30}, Amount{1, 1000, 1 << 30}, ""},
		{"one session too many", limits, Amount{3, 0, 0}, Amount{1, 0, 0}, "sessions"},
		{"cpu", limits, Amount{0, 3500, 0}, Amount{1, 1000, 0}, "cpu_millis"},
		{"memory", limits, Amount{0, 0, 8 << 30}, Amount{1, 0, 1}, "memory_bytes"},
		{"unlimited", Amount{}, Amount{1e6, 1e9, 1e15}, Amount{1, 1, 1}, ""},
		{"over already, asking nothing more of it", limits, Amount{5, 0, 0}, Amount{0, 100, 0}, ""},
	}
	for _, c := range cases {
		err := Admit(c.limits, c.used, c.asked)
		if c.resource == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var ex *ExceededError
		if !errors.As(err, &ex) || ex.Resource != c.resource || !errors.Is(err, ErrExceeded) {
			t.Errorf("%s: %v, want %s exceeded", c.name, err, c.resource)
			continue
		}
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), c.resource) {
			t.Errorf("%s: status %v", c.name, st)
		}
	}
	if got := (Amount{1, 2, 3}).Add(Amount{1, 1, 1}); got != (Amount{2, 3, 4}) {
		t.Fatalf("Add = %+v", got)
	}
}
