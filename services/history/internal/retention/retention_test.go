package retention

import (
	"testing"
	"time"
)

func TestPolicyFor(t *testing.T) {
	s := New(Config{
		Default: Policy{MaxAge: 24 * time.Hour, MaxEntries: 1000},
		Tenants: map[string]Policy{
			"age-only": {MaxAge: time.Hour},
			"big":      {MaxEntries: 1_000_000},
			"both":     {MaxAge: time.Minute, MaxEntries: 10},
		},
	}, nil, nil, nil)
	tests := []struct {
		tenant string
		want   Policy
	}{
		{"", Policy{24 * time.Hour, 1000}},
		{"anyone", Policy{24 * time.Hour, 1000}},
		{"age-only", Policy{time.Hour, 1000}},
		{"big", Policy{24 * time.Hour, 1_000_000}},
		{"both", Policy{time.Minute, 10}},
	}
	for _, tc := range tests {
		if got := s.PolicyFor(tc.tenant); got != tc.want {
			t.Errorf("PolicyFor(%q) = %+v; want %+v", tc.tenant, got, tc.want)
		}
	}
}
