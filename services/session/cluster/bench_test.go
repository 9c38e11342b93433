package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/session/placement"
)

// BenchmarkNodeKillToLost is the time from a node's last heartbeat (as when
// it is killed with -9) to the watcher handing its sessions over to be
// marked LOST, with the default 1 s heartbeat, 3 s TTL and 500 ms watch.
// The LOST write itself (one generation-checked update per session) comes
// on top; see TestCluster for the whole path.
func BenchmarkNodeKillToLost(b *testing.B) {
	reg, _ := newRegistry(b)
	ctx := context.Background()
	var total time.Duration
	for i := range b.N {
		id := fmt.Sprint("kill", i)
		m, err := Join(ctx, reg, MemberConfig{Node: NodeInfo{ID: id, Address: "127.0.0.1:1", Capacity: placement.Capacity{Sessions: 1}}}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := reg.Reserve(ctx, id, placement.Request{SessionID: id + "-s"}); err != nil {
			b.Fatal(err)
		}
		lost := make(chan struct{}, 1)
		w := Watch(reg, 0, nil, func(_ context.Context, node string) error {
			if node == id {
				select {
				case lost <- struct{}{}:
				default:
				}
			}
			return nil
		})
		_ = m.Close(ctx, false) // no leave: as a kill
		killed := time.Now()
		<-lost
		total += time.Since(killed)
		_ = w.Close(ctx)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-lost")
}
