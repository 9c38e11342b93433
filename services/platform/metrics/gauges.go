package metrics

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// SessionCount is how many sessions of one tenant are in one state on one
// node, and the CPU they asked for.
type SessionCount struct {
	Node, State, Tenant string
	N, CPUMillis        int64
}

// NodeUsage is what a node offers and what reservations hold of it.
type NodeUsage struct {
	Node            string
	Alive, Draining bool
	// Capacity and use in sessions, thousandths of a core and bytes; a
	// capacity of zero is not limited.
	CapacitySessions, UsedSessions       int64
	CapacityCPUMillis, UsedCPUMillis     int64
	CapacityMemoryBytes, UsedMemoryBytes int64
}

// ObserveSessions reports deskgrid_sessions{node,state} from count, called
// at every collection (every scrape); with perTenant, also each tenant's
// sessions and the CPU they asked for (the per-tenant usage an operator
// bills by: integrated over time they are session-seconds and reserved
// CPU-seconds). The returned function stops it.
func ObserveSessions(count func(context.Context) ([]SessionCount, error), perTenant bool) (func() error, error) {
	g, err := meter.Int64ObservableGauge("deskgrid.sessions", metric.WithDescription("unfinished sessions, by node and state"))
	if err != nil {
		return nil, err
	}
	tg, err := meter.Int64ObservableGauge("deskgrid.tenant.sessions", metric.WithDescription("unfinished sessions of each tenant, by state (with -metrics-tenant-usage)"))
	if err != nil {
		return nil, err
	}
	tc, err := meter.Int64ObservableGauge("deskgrid.tenant.cpu_millis", metric.WithDescription("CPU the running sessions of each tenant asked for, thousandths of a core (with -metrics-tenant-usage)"))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		counts, err := count(ctx)
		if err != nil {
			return err
		}
		type nodeState struct{ node, state string }
		type tenantState struct{ tenant, state string }
		byNode, byTenant, cpu := map[nodeState]int64{}, map[tenantState]int64{}, map[string]int64{}
		for _, c := range counts {
			byNode[nodeState{nodeLabel(c.Node), c.State}] += c.N
			byTenant[tenantState{c.Tenant, c.State}] += c.N
			if c.State == "running" {
				cpu[c.Tenant] += c.CPUMillis
			}
		}
		for k, n := range byNode {
			o.ObserveInt64(g, n, attrs("node", k.node, "state", k.state))
		}
		if perTenant {
			for k, n := range byTenant {
				o.ObserveInt64(tg, n, attrs("tenant", k.tenant, "state", k.state))
			}
			for t, n := range cpu {
				o.ObserveInt64(tc, n, attrs("tenant", t))
			}
		}
		return nil
	}, g, tg, tc)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// ObserveNodes reports each node's capacity, use and liveness from nodes,
// called at every collection. The returned function stops it.
func ObserveNodes(nodes func(context.Context) ([]NodeUsage, error)) (func() error, error) {
	capacity, err := meter.Int64ObservableGauge("deskgrid.node.capacity", metric.WithDescription("what a node offers sessions, by resource (sessions, cpu_millis, memory_bytes); 0 is not limited"))
	if err != nil {
		return nil, err
	}
	used, err := meter.Int64ObservableGauge("deskgrid.node.used", metric.WithDescription("what reservations hold of a node, by resource"))
	if err != nil {
		return nil, err
	}
	up, err := meter.Int64ObservableGauge("deskgrid.node.up", metric.WithDescription("1 while a node heartbeats, by whether it drains"))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		list, err := nodes(ctx)
		if err != nil {
			return err
		}
		for _, n := range list {
			node := nodeLabel(n.Node)
			for _, r := range []struct {
				name      string
				cap, used int64
			}{{"sessions", n.CapacitySessions, n.UsedSessions}, {"cpu_millis", n.CapacityCPUMillis, n.UsedCPUMillis}, {"memory_bytes", n.CapacityMemoryBytes, n.UsedMemoryBytes}} {
				o.ObserveInt64(capacity, r.cap, attrs("node", node, "resource", r.name))
				o.ObserveInt64(used, r.used, attrs("node", node, "resource", r.name))
			}
			v := int64(0)
			if n.Alive {
				v = 1
			}
			o.ObserveInt64(up, v, attrs("node", node, "draining", strconv.FormatBool(n.Draining)))
		}
		return nil
	}, capacity, used, up)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

func nodeLabel(n string) string {
	if n == "" {
		return "none"
	}
	return n
}

// ConsumerLag is how far one durable JetStream consumer (such as history's
// ingest) is behind its stream.
type ConsumerLag struct {
	Consumer string
	// Pending: events of the stream not delivered to it yet; AckPending:
	// delivered and not acknowledged yet.
	Pending, AckPending int64
}

// ObserveConsumers reports the lag of durable consumers from lags, called
// at every collection. The returned function stops it.
func ObserveConsumers(lags func(context.Context) ([]ConsumerLag, error)) (func() error, error) {
	pending, err := meter.Int64ObservableGauge("deskgrid.events.consumer.pending", metric.WithDescription("events of the stream a durable consumer (history's ingest) has not been delivered yet, by consumer"))
	if err != nil {
		return nil, err
	}
	ackPending, err := meter.Int64ObservableGauge("deskgrid.events.consumer.ack_pending", metric.WithDescription("events delivered to a durable consumer and not acknowledged yet, by consumer"))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		list, err := lags(ctx)
		if err != nil {
			return err
		}
		for _, l := range list {
			o.ObserveInt64(pending, l.Pending, attrs("consumer", l.Consumer))
			o.ObserveInt64(ackPending, l.AckPending, attrs("consumer", l.Consumer))
		}
		return nil
	}, pending, ackPending)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// ObserveBlobs reports the size of history's blob store (screenshots kept
// apart from their entries) from size, called at every collection. The
// returned function stops it.
func ObserveBlobs(size func(context.Context) (bytes, files int64, err error)) (func() error, error) {
	bytesG, err := meter.Int64ObservableGauge("deskgrid.history.blob.bytes", metric.WithDescription("bytes held by history's blob store (screenshots)"))
	if err != nil {
		return nil, err
	}
	filesG, err := meter.Int64ObservableGauge("deskgrid.history.blob.files", metric.WithDescription("blobs held by history's blob store"))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		b, n, err := size(ctx)
		if err != nil {
			return err
		}
		o.ObserveInt64(bytesG, b)
		o.ObserveInt64(filesG, n)
		return nil
	}, bytesG, filesG)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// ObserveHeartbeat reports deskgrid_node_heartbeat_age_seconds{node}, the
// time since the node's last successful heartbeat, read from last at every
// collection. It grows while Redis does not answer the node, before the
// control plane declares the node gone at the heartbeat TTL. The returned
// function stops it.
func ObserveHeartbeat(node string, last func() time.Time) (func() error, error) {
	g, err := meter.Float64ObservableGauge("deskgrid.node.heartbeat.age", metric.WithUnit("s"),
		metric.WithDescription("seconds since this node's last successful heartbeat, exported by the node"))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveFloat64(g, max(0, time.Since(last()).Seconds()), attrs("node", nodeLabel(node)))
		return nil
	}, g)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// SandboxLimitEvents is how often a node's sandboxes ran into their limits.
type SandboxLimitEvents struct {
	OOMKills, PidsLimitHits, DiskFull int64
}

// ObserveSandboxLimits reports the node's deskgrid_sandbox_oom_kills_total,
// deskgrid_sandbox_pids_limit_hits_total and deskgrid_sandbox_disk_full_total
// from events, summed over its sessions (no session label), read at every
// collection. The returned
// function stops it.
func ObserveSandboxLimits(node string, events func() SandboxLimitEvents) (func() error, error) {
	oom, err := meter.Int64ObservableCounter("deskgrid.sandbox.oom_kills", metric.WithDescription("processes of the node's sessions the kernel killed for going over their memory limit"))
	if err != nil {
		return nil, err
	}
	pids, err := meter.Int64ObservableCounter("deskgrid.sandbox.pids_limit_hits", metric.WithDescription("forks in the node's sessions refused at their pids limit"))
	if err != nil {
		return nil, err
	}
	disk, err := meter.Int64ObservableCounter("deskgrid.sandbox.disk_full", metric.WithDescription("times a session's disk was full: calls of the node's sandbox service refused for it, and disks its programs filled"))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		ev := events()
		a := attrs("node", nodeLabel(node))
		o.ObserveInt64(oom, ev.OOMKills, a)
		o.ObserveInt64(pids, ev.PidsLimitHits, a)
		o.ObserveInt64(disk, ev.DiskFull, a)
		return nil
	}, oom, pids, disk)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// ImageStoreUsage is what a node's image store holds and the room left on
// the filesystem it is on.
type ImageStoreUsage struct {
	Images                int64 // distinct images (by digest)
	LayerBytes, BlobBytes int64 // unpacked layers; compressed blobs, manifests and configs
	// FSFree and FSSize are the filesystem's bytes available to the node
	// and its size; 0 when it could not be read.
	FSFree, FSSize int64
}

// ObserveImageStore reports the node's deskgrid_image_store_images,
// deskgrid_image_store_bytes{kind} and deskgrid_image_store_filesystem_bytes{kind}
// from usage, read at every collection (usage returns false when the store
// could not be read: nothing is reported then). The returned function
// stops it.
func ObserveImageStore(node string, usage func() (ImageStoreUsage, bool)) (func() error, error) {
	images, err := meter.Int64ObservableGauge("deskgrid.image_store.images", metric.WithDescription("images (by digest) the node's image store holds"))
	if err != nil {
		return nil, err
	}
	size, err := meter.Int64ObservableGauge("deskgrid.image_store.bytes", metric.WithUnit("By"),
		metric.WithDescription("disk the node's image store uses, by kind: layers (unpacked, shared by sessions) and blobs (compressed layers, manifests, configs)"))
	if err != nil {
		return nil, err
	}
	fs, err := meter.Int64ObservableGauge("deskgrid.image_store.filesystem.bytes", metric.WithUnit("By"),
		metric.WithDescription("the filesystem the node's image store is on, by kind: free (available to the node) and size"))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		u, ok := usage()
		if !ok {
			return nil
		}
		n := nodeLabel(node)
		o.ObserveInt64(images, u.Images, attrs("node", n))
		o.ObserveInt64(size, u.LayerBytes, attrs("node", n, "kind", "layers"))
		o.ObserveInt64(size, u.BlobBytes, attrs("node", n, "kind", "blobs"))
		if u.FSSize > 0 {
			o.ObserveInt64(fs, u.FSFree, attrs("node", n, "kind", "free"))
			o.ObserveInt64(fs, u.FSSize, attrs("node", n, "kind", "size"))
		}
		return nil
	}, images, size, fs)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// HistoryIngest is what this process's history ingest has done since it
// started.
type HistoryIngest struct {
	Stored, Duplicates, Rejected int64
	// StoreFailures are batches the store refused (they are delivered
	// again).
	StoreFailures int64
}

// ObserveHistoryIngest reports deskgrid_history_ingested_events_total{outcome}
// (stored, duplicate: delivered again and dropped, rejected: not a valid
// event) and deskgrid_history_ingest_store_failures_total from stats, read
// at every collection. The returned function stops it.
func ObserveHistoryIngest(stats func() HistoryIngest) (func() error, error) {
	events, err := meter.Int64ObservableCounter("deskgrid.history.ingested.events",
		metric.WithDescription("events history's ingest took from the stream, by outcome: stored, duplicate (delivered again, dropped), rejected (not a valid event)"))
	if err != nil {
		return nil, err
	}
	failures, err := meter.Int64ObservableCounter("deskgrid.history.ingest.store_failures",
		metric.WithDescription("batches of events the history store failed to write; they are delivered again"))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := stats()
		o.ObserveInt64(events, st.Stored, attrs("outcome", "stored"))
		o.ObserveInt64(events, st.Duplicates, attrs("outcome", "duplicate"))
		o.ObserveInt64(events, st.Rejected, attrs("outcome", "rejected"))
		o.ObserveInt64(failures, st.StoreFailures)
		return nil
	}, events, failures)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}
