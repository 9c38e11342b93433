package telemetry_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/platform/telemetry"
)

// The PostgreSQL query metric is served under the name docs/operations.md
// and the cluster dashboard use (a role on SQLite, as `deskgrid up`, never
// exports it, so no test of a running deskgrid reads it).
func TestPostgresQueryExported(t *testing.T) {
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	metrics.PostgresQuery(ctx, "session", "select", 3*time.Millisecond, nil)
	metrics.PostgresQuery(ctx, "session", "insert", time.Millisecond, context.DeadlineExceeded)
	metrics.PostgresQuery(ctx, "session", "insert", time.Millisecond, errors.New("connection refused"))
	rec := httptest.NewRecorder()
	tel.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range [][]string{
		{"deskgrid_postgres_query_duration_seconds_bucket{", `operation="select"`, `outcome="ok"`, `store="session"`, `le="0.001"} 0`},
		{"deskgrid_postgres_query_duration_seconds_bucket{", `operation="select"`, `outcome="ok"`, `store="session"`, `le="0.005"} 1`},
		{"deskgrid_postgres_query_duration_seconds_count{", `operation="insert"`, `outcome="timeout"`, `store="session"`, "} 1"},
		{"deskgrid_postgres_query_duration_seconds_count{", `operation="insert"`, `outcome="unavailable"`, `store="session"`, "} 1"},
	} {
		if !hasLine(string(body), want) {
			t.Errorf("no %s in\n%s", strings.Join(want, " "), hasLinesOf(string(body), "deskgrid_postgres"))
		}
	}
}

// hasLine tells whether a line of s starts with parts[0] and holds the others.
func hasLine(s string, parts []string) bool {
lines:
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, parts[0]) {
			continue
		}
		for _, p := range parts[1:] {
			if !strings.Contains(l, p) {
				continue lines
			}
		}
		return true
	}
	return false
}

func hasLinesOf(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
