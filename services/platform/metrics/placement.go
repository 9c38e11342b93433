package metrics

import "context"

var (
	placementDecisions = counter("deskgrid.placement.decisions", "",
		"placements by outcome: placed, no_capacity, no_matching_node, unavailable, cancelled")
	placementRetries = counter("deskgrid.placement.retries", "",
		"placement attempts tried again within one placement, by reason: reservation_refused (another replica took the room first), stale_snapshot (a cached view of the nodes fit nothing)")
)

// PlacementOutcomes are the values deskgrid_placement_decisions_total's
// outcome takes.
var PlacementOutcomes = []string{"placed", "no_capacity", "no_matching_node", "unavailable", "cancelled"}

// PlacementDecided counts one placement by its outcome (PlacementOutcomes).
func PlacementDecided(ctx context.Context, outcome string) {
	placementDecisions.Add(context.WithoutCancel(ctx), 1, attrs("outcome", outcome))
}

// PlacementRetried counts one attempt of a placement tried again, by
// reason ("reservation_refused", "stale_snapshot").
func PlacementRetried(ctx context.Context, reason string) {
	placementRetries.Add(context.WithoutCancel(ctx), 1, attrs("reason", reason))
}
