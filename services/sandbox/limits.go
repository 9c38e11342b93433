package sandbox

import (
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/cgroup"
)

// Limits bound one sandbox. Zero means unlimited.
type Limits struct {
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// CPUMillis is CPU time per second: 1000 is one core.
	CPUMillis int64 `json:"cpu_millis,omitempty"`
	Pids      int64 `json:"pids,omitempty"`
	DiskBytes int64 `json:"disk_bytes,omitempty"`
}

func (l Limits) cgroup() cgroup.Limits {
	return cgroup.Limits{MemoryBytes: l.MemoryBytes, CPUMillis: l.CPUMillis, Pids: l.Pids}
}

func (l Limits) proto() *sandboxv1.SandboxLimits {
	return &sandboxv1.SandboxLimits{MemoryBytes: l.MemoryBytes, CpuMillis: l.CPUMillis, Pids: l.Pids, DiskBytes: l.DiskBytes}
}

// limitsFor fills a request's unset limits with the defaults and refuses
// any over the node's maximum.
func (s *Service) limitsFor(req Limits) (Limits, error) {
	out := s.cfg.Limits
	for _, f := range []struct {
		name     string
		req, max int64
		out      *int64
	}{
		{"memory_bytes", req.MemoryBytes, s.cfg.MaxLimits.MemoryBytes, &out.MemoryBytes},
		{"cpu_millis", req.CPUMillis, s.cfg.MaxLimits.CPUMillis, &out.CPUMillis},
		{"pids", req.Pids, s.cfg.MaxLimits.Pids, &out.Pids},
		{"disk_bytes", req.DiskBytes, s.cfg.MaxLimits.DiskBytes, &out.DiskBytes},
	} {
		switch {
		case f.req < 0:
			return Limits{}, invalidf("%s %d is negative", f.name, f.req)
		case f.req > 0 && f.max > 0 && f.req > f.max:
			return Limits{}, invalidf("%s %d is over this node's maximum of %d", f.name, f.req, f.max)
		case f.req > 0:
			*f.out = f.req
		}
	}
	return out, nil
}

// maxLayerRead bounds what the node reads out of a session's layer at once
// when the session has no disk limit.
const maxLayerRead = 64 << 30

// layerBytes bounds the bytes the node reads out of a session's layer into
// one archive (a commit, a snapshot): its disk limit, which only sparse
// files can pass in size, else maxLayerRead. A session's file of terabytes
// of holes would otherwise keep the node compressing zeros for hours.
func (b *box) layerBytes() int64 {
	if b.limits.DiskBytes > 0 {
		return b.limits.DiskBytes
	}
	return maxLayerRead
}
