package metrics

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

var postgresQuery = histogram("deskgrid.postgres.query.duration",
	"one PostgreSQL query of a store, by store, operation and outcome")

// PostgresQuery records one query of a store's PostgreSQL connections
// (sqlstore's query tracer calls it): deskgrid_postgres_query_duration_seconds
// by store (session, agent, auth, history), operation (the statement's first
// keyword: select, insert, update, delete, begin, commit, ... or other) and
// outcome (see PostgresOutcome).
func PostgresQuery(ctx context.Context, store, op string, d time.Duration, err error) {
	postgresQuery.Record(context.WithoutCancel(ctx), secs(d), attrs("store", store, "operation", op, "outcome", PostgresOutcome(err)))
}

// PostgresOutcome classes a query's error: ok; timeout or cancelled (the
// caller's context, or a server statement timeout); conflict (a unique,
// foreign-key or check violation, or a serialization failure: the query ran
// and the data refused it); error (any other error PostgreSQL answered);
// unavailable (no answer: the connection failed).
func PostgresOutcome(err error) string {
	var pe *pgconn.PgError
	var nerr net.Error
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &pe):
		switch {
		case pe.Code == "57014": // query_canceled: statement_timeout or a cancel request
			return "timeout"
		case len(pe.Code) == 5 && pe.Code[:2] == "23", pe.Code == "40001", pe.Code == "40P01":
			return "conflict"
		}
		return "error"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	default:
		return "unavailable"
	}
}
