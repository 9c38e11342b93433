package metrics

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
)

// Event subjects counted (kept beside the constants of the packages that
// publish them, events and agent/internal/runlog, which this package does not import).
const (
	sessionStateSubject = "deskgrid.events.*.session.state_changed.v1"
	runStateSubject     = "deskgrid.events.*.agent.run_state_changed.v1"
	usageSubject        = "deskgrid.events.*.agent.usage.v1"
	// queueGroup: replicas of a role share the events, so each is counted
	// once however many replicas run.
	queueGroup = "deskgrid-metrics"
)

// EventKinds choose what CountEvents counts.
type EventKinds struct {
	Sessions bool // session state changes (session role)
	Runs     bool // agent run state changes and token usage (agent role)
	// TenantUsage counts tokens per tenant too (deskgrid_tenant_tokens_total).
	TenantUsage bool
}

// CountEvents counts session and run state changes and token usage as
// they are published, until the returned function is called. It reads
// core NATS (no JetStream consumer): a count missed while NATS is down is
// lost, as a scrape missed would be.
func CountEvents(nc *nats.Conn, kinds EventKinds) (stop func() error, err error) {
	var subs []*nats.Subscription
	stop = func() error {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
		return nil
	}
	sub := func(subject string, fn func(*eventsv1.Event)) error {
		s, err := nc.QueueSubscribe(subject, queueGroup, func(m *nats.Msg) {
			ev := &eventsv1.Event{}
			if proto.Unmarshal(m.Data, ev) == nil {
				fn(ev)
			}
		})
		if err != nil {
			return fmt.Errorf("metrics: subscribe %s: %w", subject, err)
		}
		subs = append(subs, s)
		return nil
	}
	ctx := context.Background()
	handlers := []struct {
		on      bool
		subject string
		fn      func(*eventsv1.Event)
	}{
		{kinds.Sessions, sessionStateSubject, func(ev *eventsv1.Event) {
			var sc eventsv1.SessionStateChanged
			if ev.GetPayload().UnmarshalTo(&sc) == nil {
				sessionTransitions.Add(ctx, 1, attrs("state", stateName(sc.GetTo().String(), "SESSION_STATE_"), "reason", Reason(sc.GetReason())))
			}
		}},
		{kinds.Runs, runStateSubject, func(ev *eventsv1.Event) {
			var r agentv1.RunEventRecord
			if ev.GetPayload().UnmarshalTo(&r) == nil {
				agentRuns.Add(ctx, 1, attrs("state", stateName(r.GetState().String(), "RUN_STATE_"), "provider", Provider(r.GetProvider())))
			}
		}},
		{kinds.Runs, usageSubject, func(ev *eventsv1.Event) {
			var r agentv1.RunEventRecord
			if ev.GetPayload().UnmarshalTo(&r) != nil {
				return
			}
			p := Provider(r.GetProvider())
			for kind, n := range map[string]int64{"input": r.GetInputTokens(), "output": r.GetOutputTokens(), "cache_read": r.GetCacheReadTokens(), "cache_write": r.GetCacheWriteTokens()} {
				if n > 0 {
					agentTokens.Add(ctx, n, attrs("provider", p, "kind", kind))
					if kinds.TenantUsage {
						tenantTokens.Add(ctx, n, attrs("tenant", ev.GetTenant(), "provider", p, "kind", kind))
					}
				}
			}
		}},
	}
	for _, h := range handlers {
		if !h.on {
			continue
		}
		if err := sub(h.subject, h.fn); err != nil {
			_ = stop()
			return nil, err
		}
	}
	if err := nc.Flush(); err != nil {
		_ = stop()
		return nil, fmt.Errorf("metrics: subscribe: %w", err)
	}
	return stop, nil
}

func stateName(s, prefix string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }
