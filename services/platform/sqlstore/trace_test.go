package sqlstore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// BenchmarkTracer is what timing one query adds to it: the span (recorded,
// with the test binary's tracer provider) and the histogram record.
func BenchmarkTracer(b *testing.B) {
	t := &tracer{store: "bench"}
	ctx := context.Background()
	for b.Loop() {
		qctx := t.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "SELECT data FROM session_records WHERE id = $1"})
		t.TraceQueryEnd(qctx, nil, pgx.TraceQueryEndData{})
	}
}
