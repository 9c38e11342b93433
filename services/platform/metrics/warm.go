package metrics

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

var (
	warmClaims = counter("deskgrid.warm_desktop.claims", "",
		"creates that asked the node's warm desktop pools for a desktop, by the pool's image and outcome (hit, miss)")
)

// WarmDesktopClaimed counts one create that asked for a warm desktop:
// image is the pool's configured ref (operator-chosen, so bounded), or
// "other" for a create of an image no pool keeps.
func WarmDesktopClaimed(ctx context.Context, image string, hit bool) {
	o := "miss"
	if hit {
		o = "hit"
	}
	warmClaims.Add(context.WithoutCancel(ctx), 1, attrs("image", image, "outcome", o))
}

// ObserveWarmDesktops reports deskgrid_warm_desktops{image} from ready,
// called at every collection, and zeroes the pool's claim counters so their
// series exist from the first scrape. The returned function stops it.
func ObserveWarmDesktops(image string, ready func() int) (func() error, error) {
	g, err := meter.Int64ObservableGauge("deskgrid.warm_desktops",
		metric.WithDescription("warm desktops ready to be given to a session, by the pool's image"))
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	for _, o := range []string{"hit", "miss"} {
		warmClaims.Add(ctx, 0, attrs("image", image, "outcome", o))
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, int64(ready()), attrs("image", image))
		return nil
	}, g)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}
