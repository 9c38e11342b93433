package sandbox

import "github.com/deskgrid/deskgrid/services/sandbox/cgroup"

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
}

// LimitEvents is how often the node's sandboxes ran into their limits:
// processes the kernel killed for going over memory and forks refused at
// the pids limit, summed over every group, so no label names a session.
func (s *Service) LimitEvents() cgroup.Events {
	if s.cgroups == nil {
		return cgroup.Events{}
	}
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	total := s.limits.retired
	names, err := s.cgroups.List()
	if err != nil {
		return total
	}
	for _, n := range names {
		if !s.limits.deleting[n] {
			total = total.Add(s.cgroups.Events(n))
		}
	}
	return total
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
