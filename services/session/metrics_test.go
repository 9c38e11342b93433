package session

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/deskgrid/deskgrid/services/platform/metrics/metricstest"
)

// reader holds what the package's code recorded.
var reader = metricstest.Global()

// suspendCounts reads deskgrid_session_suspends_total and
// deskgrid_session_resumes_total as "suspend|resume mode outcome" -> count.
func suspendCounts(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, kind := range []string{"suspend", "resume"} {
		for _, mode := range []string{"freeze", "hibernate", "unknown", "none"} {
			for _, o := range []string{"ok", "invalid_argument", "failed_precondition", "unavailable", "not_found", "cancelled", "internal"} {
				if n := metricstest.Sum(t, reader, "deskgrid.session."+kind+"s", attribute.String("mode", mode), attribute.String("outcome", o)); n != 0 {
					out[kind+" "+mode+" "+o] = n
				}
			}
		}
	}
	return out
}
