package sandbox

import (
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/deskgrid/deskgrid/services/sandbox/cgroup"
)

// limitTally adds up the limit events of the node's sandboxes for the node
// counters: the groups on the node, read at each call, plus what the groups
// deleted since this process started had counted. A group's counts are
// moved to retired just before it is deleted, and it is read no more, so the
// totals never go back.
type limitTally struct {
	retired cgroup.Events
	// deleting are groups whose counts are in retired but that are still
	// on the node.
	deleting map[string]bool
	// diskFull counts calls refused because a session's disk was full,
	// and the times a session's disk was found full by its own programs.
	diskFull atomic.Uint64
}

// LimitEvents is how often the node's sandboxes ran into their limits.
type LimitEvents struct {
	cgroup.Events
	// DiskFull counts calls of this service (uploads, file writes, copies)
	// refused because the session's disk was full, and the times a
	// session's own programs filled it (found full when the counts are
	// read, once until it has room again).
	DiskFull uint64
}

// LimitEvents is how often the node's sandboxes ran into their limits:
// processes the kernel killed for going over memory, forks refused at the
// pids limit and calls refused for a full disk, summed over every session,
// so no label names one.
func (s *Service) LimitEvents() LimitEvents {
	s.sweepFullDisks()
	ev := LimitEvents{DiskFull: s.limits.diskFull.Load()}
	if s.cgroups == nil {
		return ev
	}
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	ev.Events = s.limits.retired
	names, err := s.cgroups.List()
	if err != nil {
		return ev
	}
	for _, n := range names {
		if !s.limits.deleting[n] {
			ev.Events = ev.Events.Add(s.cgroups.Events(n))
		}
	}
	return ev
}

// retireLimits moves g's counts to the retired totals before g is deleted.
func (s *Service) retireLimits(g *cgroup.Group) {
	if s.cgroups == nil || g == nil {
		return
	}
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	if s.limits.deleting[g.ID()] {
		return // a delete that failed before; its counts are in already
	}
	s.limits.retired = s.limits.retired.Add(s.cgroups.Events(g.ID()))
	if s.limits.deleting == nil {
		s.limits.deleting = map[string]bool{}
	}
	s.limits.deleting[g.ID()] = true
}

// limitsDeleted forgets a deleted group, so a new group of that name counts.
func (s *Service) limitsDeleted(g *cgroup.Group) {
	if s.cgroups == nil || g == nil {
		return
	}
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	delete(s.limits.deleting, g.ID())
}

// diskFullBelow is the room left under which a session's disk counts as
// full: a program writing meets ENOSPC about there (ext4 keeps a few blocks
// for its own metadata).
const diskFullBelow = 64 << 10

// sweepFullDisks counts each size-limited disk that a program in its
// session filled since the last look: a program meets ENOSPC itself, which
// nothing on the node is told of, so the node looks at the room left on
// each disk whenever the counts are read. A disk counts once until it has
// room again.
func (s *Service) sweepFullDisks() {
	s.mu.Lock()
	boxes := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		if b.disk != "" {
			boxes = append(boxes, b)
		}
	}
	s.mu.Unlock()
	for _, b := range boxes {
		var st unix.Statfs_t
		if err := unix.Statfs(b.layerDir(), &st); err != nil {
			continue // being deleted, or not mounted yet
		}
		full := st.Bavail*uint64(st.Bsize) < diskFullBelow
		if full && !b.diskFull.Swap(true) {
			s.limits.diskFull.Add(1)
		} else if !full {
			b.diskFull.Store(false)
		}
	}
}
