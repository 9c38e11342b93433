package history_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	"github.com/deskgrid/deskgrid/services/history/internal/storetest"
)

// Oversized ids and search text are bad input (400), refused with the
// limit named, not a store failure (503).
func TestInputLimits(t *testing.T) {
	o := storetest.All[0]
	e := newEnv(t)
	c := client(t, startService(t, e, o.Open(t), testConfig()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	long := strings.Repeat("s", 5000)
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"list a session", func() error {
			_, err := c.ListSessionHistory(ctx, &historyv1.ListSessionHistoryRequest{SessionId: long})
			return err
		}, "session_id is 5000 bytes"},
		{"list a run", func() error {
			_, err := c.ListRunEntries(ctx, &historyv1.ListRunEntriesRequest{RunId: long})
			return err
		}, "run_id is 5000 bytes"},
		{"transcript", func() error {
			_, err := c.GetRunTranscript(ctx, &historyv1.GetRunTranscriptRequest{RunId: long})
			return err
		}, "run_id is 5000 bytes"},
		{"search", func() error {
			_, err := c.SearchHistory(ctx, &historyv1.SearchHistoryRequest{Query: long})
			return err
		}, "query is 5000 bytes"},
		{"delete", func() error {
			_, err := c.DeleteSessionHistory(ctx, &historyv1.DeleteSessionHistoryRequest{SessionId: long})
			return err
		}, "session_id is 5000 bytes"},
	} {
		err := tc.call()
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument with %q", tc.name, err, tc.want)
		}
	}
	// An id at the limit is looked for: a session without entries is
	// NotFound, not refused as bad input.
	if _, err := c.ListSessionHistory(ctx, &historyv1.ListSessionHistoryRequest{SessionId: strings.Repeat("s", 128)}); status.Code(err) != codes.NotFound {
		t.Fatalf("an id at the limit: %v", err)
	}
}
