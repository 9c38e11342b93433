// Package metrics holds deskgrid's domain metrics: what an operator asks of
// a cluster (sessions by state and node, how long creates take and why they
// fail, screenshot and action latency, execs, image pulls, agent runs and
// tokens, lease waits, refused calls, lost events, reconcile removals),
// recorded through the OpenTelemetry API and served by the Prometheus
// exporter telemetry.Setup installs.
//
// Every label takes values from a small fixed set (outcomes, states, phases,
// providers) or names a node: never a session, run or tenant id, so the
// series count stays bounded however many sessions come and go.
// docs/operations.md lists each metric.
//
// Most figures are taken at the edges without touching the services: a gRPC
// server interceptor (grpc.go) reads the requests and responses of the RPCs
// that matter, a client interceptor attributes a create's node calls to its
// phases (notes.go), and an event counter (events.go) counts state changes
// from the event stream. Services add a note where only they know a fact
// (a warm display, a cached image) with Note.
package metrics

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Instruments are made once from the global meter provider; the OpenTelemetry
// API forwards them to the provider telemetry.Setup installs later, like the
// package-level tracer handles elsewhere. Without a provider they cost nothing.
var meter = otel.Meter("github.com/deskgrid/deskgrid/services/platform/metrics")

// Latency buckets, in seconds: from a fast screenshot (a few ms) to a slow
// create (tens of seconds).
var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func histogram(name, desc string) metric.Float64Histogram {
	h, _ := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(latencyBuckets...))
	return h
}

func counter(name, unit, desc string) metric.Int64Counter {
	c, _ := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	return c
}

var (
	sessionCreate = histogram("deskgrid.session.create.duration",
		"CreateSession from the call to the first screenshot, by outcome and whether the node had the image and a warm display")
	sessionCreatePhase = histogram("deskgrid.session.create.phase.duration",
		"one node call of a create: sandbox, display, first_screenshot, desktop (window manager and autostart programs)")
	sessionTransitions = counter("deskgrid.session.transitions", "",
		"session state changes, by the state entered and a bounded reason")

	displayCreate = histogram("deskgrid.display.create.duration", "CreateDisplay on the node, by whether a warm display was used")
	sandboxCreate = histogram("deskgrid.sandbox.create.duration", "CreateSandbox on the node, by whether the image was already on the node")
	screenshot    = histogram("deskgrid.display.screenshot.duration", "Screenshot on the node, by format and outcome")
	screenshotB   = counter("deskgrid.display.screenshot.bytes", "By", "encoded screenshot bytes returned")
	actions       = histogram("deskgrid.display.actions.duration", "PerformActions on the node (input, settle wait and screenshot), by outcome and settle outcome")
	execDur       = histogram("deskgrid.sandbox.exec.duration", "Exec and RunShell in a sandbox, by kind and outcome")
	imagePulls    = counter("deskgrid.image.pulls", "", "image pulls from a registry, by outcome")
	imagePullB    = counter("deskgrid.image.pull.bytes", "By", "compressed size of the images pulled")
	reconciled    = counter("deskgrid.node.reconcile.removed", "", "displays and sandboxes a node removed because no session owns them")

	agentRuns   = counter("deskgrid.agent.run.transitions", "", "agent run state changes, by the state entered and provider")
	agentTokens = counter("deskgrid.agent.tokens", "", "model tokens used by agent runs, by provider and kind")
	// Per tenant, only with -metrics-tenant-usage: tenants are made by an
	// operator, so their number is bounded, but it may be large.
	tenantTokens = counter("deskgrid.tenant.tokens", "", "model tokens used by each tenant's agent runs, by provider and kind")
	leaseWait    = histogram("deskgrid.agent.lease.wait.duration", "time an AcquireInputLease waited, by outcome")

	rateLimited    = counter("deskgrid.rate_limited", "", "calls refused by the per-key rate limit, by surface")
	publishFailure = counter("deskgrid.events.publish.failures", "", "events that could not be published to NATS, by event type")
)

func attrs(kv ...string) metric.MeasurementOption {
	a := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		a = append(a, attribute.String(kv[i], kv[i+1]))
	}
	return metric.WithAttributes(a...)
}

func secs(d time.Duration) float64 { return d.Seconds() }

// Outcome names an error's class: "ok" for nil, else the gRPC code in
// snake case ("deadline_exceeded", "resource_exhausted", ...).
func Outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return codeName(status.Code(err))
}

func codeName(c codes.Code) string {
	if c == codes.OK {
		return "ok"
	}
	var b strings.Builder
	for i, r := range c.String() {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Reconciled counts displays or sandboxes ("display", "sandbox") a node
// removed for want of an owner.
func Reconciled(ctx context.Context, kind string, n int) {
	if n > 0 {
		reconciled.Add(ctx, int64(n), attrs("kind", kind))
	}
}

// RateLimited counts a call the rate limit refused on surface ("http", "grpc").
func RateLimited(ctx context.Context, surface string) {
	rateLimited.Add(ctx, 1, attrs("surface", surface))
}

// PublishFailed counts an event of type typ that NATS did not take.
func PublishFailed(ctx context.Context, typ string) {
	publishFailure.Add(ctx, 1, attrs("type", typ))
}

// ImagePulled counts a pull from a registry and, when it succeeded, its
// compressed bytes.
func ImagePulled(ctx context.Context, err error, bytes int64) {
	imagePulls.Add(ctx, 1, attrs("outcome", Outcome(err)))
	if err == nil && bytes > 0 {
		imagePullB.Add(ctx, bytes)
	}
}

// LeaseWaited records how long an input lease acquire waited.
func LeaseWaited(ctx context.Context, d time.Duration, err error) {
	o := Outcome(err)
	if err != nil && ctx.Err() != nil {
		o = "cancelled"
	}
	leaseWait.Record(context.WithoutCancel(ctx), secs(d), attrs("outcome", o))
}

// Provider bounds a provider name to the known ones.
func Provider(p string) string {
	switch p {
	case "anthropic", "openai", "gemini":
		return p
	case "":
		return "unknown"
	}
	return "other"
}

// Reason maps a session state reason, free text, to a few classes:
// none, deleted, ttl, idle, stale, node_lost, suspend, placement, timeout,
// image, node (a node call failed) or other.
func Reason(reason string) string {
	r := strings.ToLower(reason)
	has := func(subs ...string) bool {
		for _, x := range subs {
			if strings.Contains(r, x) {
				return true
			}
		}
		return false
	}
	switch {
	case r == "":
		return "none"
	case r == "deleted":
		return "deleted"
	case r == "ttl expired":
		return "ttl"
	case r == "idle timeout":
		return "idle"
	case has("abandoned"):
		return "stale"
	case has("heartbeat expired", "node restarted"):
		return "node_lost"
	case has("suspend"):
		return "suspend"
	case has("placement"):
		return "placement"
	case has("deadline exceeded", "did not start within", "timed out"):
		return "timeout"
	case has("image"):
		return "image"
	case strings.HasPrefix(r, "node "):
		return "node"
	}
	return "other"
}

// Start zeroes the counters whose label values are known up front, so the
// series exist from the first scrape: a rate or increase over a counter
// that appears only at its first count misses that count, and alerts on
// them (failed pulls, failed publishes) would never fire on the first.
// telemetry.Setup calls it once the meter provider is installed.
func Start(ctx context.Context) {
	for _, s := range []string{"http", "grpc"} {
		rateLimited.Add(ctx, 0, attrs("surface", s))
	}
	for _, o := range []string{"ok", "failed"} {
		imagePulls.Add(ctx, 0, attrs("outcome", o))
	}
	imagePullB.Add(ctx, 0)
	screenshotB.Add(ctx, 0)
	for _, k := range []string{"display", "sandbox"} {
		reconciled.Add(ctx, 0, attrs("kind", k))
	}
	publishFailure.Add(ctx, 0, attrs("type", "session.state_changed.v1"))
	sessionTransitions.Add(ctx, 0, attrs("state", "lost", "reason", "node_lost"))
	for _, o := range PlacementOutcomes {
		placementDecisions.Add(ctx, 0, attrs("outcome", o))
	}
	for _, r := range []string{"reservation_refused", "stale_snapshot"} {
		placementRetries.Add(ctx, 0, attrs("reason", r))
	}
	for _, m := range []string{"freeze", "hibernate"} {
		sessionSuspends.Add(ctx, 0, attrs("mode", m, "outcome", "ok"))
		sessionResumes.Add(ctx, 0, attrs("mode", m, "outcome", "ok"))
	}
}
