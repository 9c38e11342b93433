package sqlstore

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

var otelTracer = otel.Tracer("github.com/deskgrid/deskgrid/services/platform/sqlstore")

// tracer is the pgx QueryTracer of a store's PostgreSQL connections: each
// query is timed into deskgrid_postgres_query_duration_seconds by store,
// operation and outcome, and is a client span when tracing is on.
type tracer struct{ store string }

type queryKey struct{}

type query struct {
	start time.Time
	op    string
	span  trace.Span
}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	op := Operation(data.SQL)
	ctx, span := otelTracer.Start(ctx, "postgres "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("db.system.name", "postgresql"),
			attribute.String("db.operation.name", op),
			attribute.String("db.query.text", data.SQL),
			attribute.String("deskgrid.store", t.store),
		))
	return context.WithValue(ctx, queryKey{}, &query{start: time.Now(), op: op, span: span})
}

func (t *tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	q, ok := ctx.Value(queryKey{}).(*query)
	if !ok {
		return
	}
	metrics.PostgresQuery(ctx, t.store, q.op, time.Since(q.start), data.Err)
	if data.Err != nil {
		q.span.RecordError(data.Err)
		q.span.SetStatus(codes.Error, metrics.PostgresOutcome(data.Err))
	}
	q.span.End()
}

// operations are the statements a query's operation label names; any other
// is "other", so the label has a small fixed set of values.
var operations = map[string]bool{
	"select": true, "insert": true, "update": true, "delete": true, "with": true,
	"begin": true, "commit": true, "rollback": true, "savepoint": true, "release": true,
	"create": true, "alter": true, "drop": true, "lock": true, "set": true, "show": true,
}

// Operation is the operation label of a statement: its first keyword in
// lower case ("select", "insert", "begin", ...), or "other".
func Operation(sql string) string {
	s := strings.TrimLeft(sql, " \t\r\n(")
	for strings.HasPrefix(s, "--") || strings.HasPrefix(s, "/*") {
		var rest string
		var ok bool
		if strings.HasPrefix(s, "--") {
			_, rest, ok = strings.Cut(s, "\n")
		} else {
			_, rest, ok = strings.Cut(s, "*/")
		}
		if !ok {
			return "other"
		}
		s = strings.TrimLeft(rest, " \t\r\n(")
	}
	end := strings.IndexFunc(s, func(r rune) bool { return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') })
	if end < 0 {
		end = len(s)
	}
	if op := strings.ToLower(s[:end]); operations[op] {
		return op
	}
	return "other"
}
