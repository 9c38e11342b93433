// Package metricstest reads what a test's meter provider recorded.
package metricstest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Global makes a meter provider that records into the reader it returns
// the process's global one: a test package's metrics, read back with Sum,
// HistCount and Gauge. Called once, from a package-level var.
func Global() *sdkmetric.ManualReader {
	r := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)))
	return r
}

// points calls add with each data point of instrument name whose
// attributes include want.
func points(tb testing.TB, r sdkmetric.Reader, name string, want []attribute.KeyValue, add func(data metricdata.Aggregation, i int)) {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		tb.Fatal(err)
	}
	match := func(set attribute.Set) bool {
		for _, kv := range want {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for i, p := range d.DataPoints {
					if match(p.Attributes) {
						add(d, i)
					}
				}
			case metricdata.Sum[int64]:
				for i, p := range d.DataPoints {
					if match(p.Attributes) {
						add(d, i)
					}
				}
			case metricdata.Gauge[float64]:
				for i, p := range d.DataPoints {
					if match(p.Attributes) {
						add(d, i)
					}
				}
			case metricdata.Gauge[int64]:
				for i, p := range d.DataPoints {
					if match(p.Attributes) {
						add(d, i)
					}
				}
			default:
				tb.Fatalf("%s is %T", name, m.Data)
			}
		}
	}
}

// HistCount adds the observation counts of float histogram name's points
// whose attributes include want.
func HistCount(tb testing.TB, r sdkmetric.Reader, name string, want ...attribute.KeyValue) uint64 {
	tb.Helper()
	var n uint64
	points(tb, r, name, want, func(data metricdata.Aggregation, i int) {
		h, ok := data.(metricdata.Histogram[float64])
		if !ok {
			tb.Fatalf("%s is %T, not a histogram", name, data)
		}
		n += h.DataPoints[i].Count
	})
	return n
}

// Sum adds the int64 counter points of name whose attributes include want.
func Sum(tb testing.TB, r sdkmetric.Reader, name string, want ...attribute.KeyValue) int64 {
	tb.Helper()
	var n int64
	points(tb, r, name, want, func(data metricdata.Aggregation, i int) {
		s, ok := data.(metricdata.Sum[int64])
		if !ok {
			tb.Fatalf("%s is %T, not a sum", name, data)
		}
		n += s.DataPoints[i].Value
	})
	return n
}

// Gauge returns the value of float gauge name's point whose attributes
// include want, and whether there is one.
func Gauge(tb testing.TB, r sdkmetric.Reader, name string, want ...attribute.KeyValue) (float64, bool) {
	tb.Helper()
	var v float64
	found := false
	points(tb, r, name, want, func(data metricdata.Aggregation, i int) {
		g, ok := data.(metricdata.Gauge[float64])
		if !ok {
			tb.Fatalf("%s is %T, not a float gauge", name, data)
		}
		v, found = g.DataPoints[i].Value, true
	})
	return v, found
}

// IntGauge returns the value of int gauge name's point whose attributes
// include want, and whether there is one.
func IntGauge(tb testing.TB, r sdkmetric.Reader, name string, want ...attribute.KeyValue) (int64, bool) {
	tb.Helper()
	var v int64
	found := false
	points(tb, r, name, want, func(data metricdata.Aggregation, i int) {
		g, ok := data.(metricdata.Gauge[int64])
		if !ok {
			tb.Fatalf("%s is %T, not an int gauge", name, data)
		}
		v, found = g.DataPoints[i].Value, true
	})
	return v, found
}
