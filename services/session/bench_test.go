package session

import (
	"context"
	"testing"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// BenchmarkCreateDeleteSession is the session service's own share of a
// create and a delete: validation, every state written to SQLite and
// published to JetStream, placement, over real gRPC, with nodes that answer
// at once.
func BenchmarkCreateDeleteSession(b *testing.B) {
	h := newHarness(b)
	ctx := context.Background()
	for b.Loop() {
		r, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.client.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: r.GetSession().GetId()}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetSession(b *testing.B) {
	h := newHarness(b)
	ctx := context.Background()
	r, err := h.client.CreateSession(ctx, &sessionv1.CreateSessionRequest{})
	if err != nil {
		b.Fatal(err)
	}
	req := &sessionv1.GetSessionRequest{SessionId: r.GetSession().GetId()}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := h.client.GetSession(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
