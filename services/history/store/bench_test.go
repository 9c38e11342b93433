package store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/history/internal/storetest"
	"github.com/deskgrid/deskgrid/services/history/store"
)

// benchBatch is the batch the ingester writes at most per transaction.
const benchBatch = 256

// benchData is the size of a typical state-change payload.
var benchData = `{"@type":"type.googleapis.com/deskgrid.events.v1.SessionStateChanged","from":"SESSION_STATE_STARTING","to":"SESSION_STATE_RUNNING","session":{"id":"s-0123456789","tenant":"acme","state":"SESSION_STATE_RUNNING"}}`

func benchAppend(b *testing.B, s *store.SQL) {
	ctx := context.Background()
	batch := make([]store.Entry, benchBatch)
	seq := int64(0)
	now := time.Now()
	b.ResetTimer()
	for b.Loop() {
		for i := range batch {
			seq++
			batch[i] = store.Entry{
				ID:        fmt.Sprintf("ev-%012d", seq),
				SessionID: fmt.Sprintf("s-%d", seq%64),
				Sequence:  seq,
				Type:      "session.state_changed.v1",
				Time:      now,
				Tenant:    "acme",
				Data:      benchData,
			}
		}
		if _, err := s.Append(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkAppendSQLite appends batches of 256 entries, one transaction each.
func BenchmarkAppendSQLite(b *testing.B) { benchAppend(b, storetest.SQLite(b)) }

// BenchmarkAppendPostgres appends batches of 256 entries, one transaction each.
func BenchmarkAppendPostgres(b *testing.B) { benchAppend(b, storetest.Postgres(b)) }

// BenchmarkAppendParallel appends batches of 256 from four writers at once,
// as several history replicas sharing the consumer do: PostgreSQL commits
// them together, SQLite one after another.
func BenchmarkAppendParallel(b *testing.B) {
	for _, o := range storetest.All {
		b.Run(o.Name, func(b *testing.B) {
			s := o.Open(b)
			ctx := context.Background()
			var seq atomic.Int64
			now := time.Now()
			b.SetParallelism(2) // 2 x GOMAXPROCS writers
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				batch := make([]store.Entry, benchBatch)
				for pb.Next() {
					for i := range batch {
						n := seq.Add(1)
						batch[i] = store.Entry{
							ID: fmt.Sprintf("ev-%012d", n), SessionID: fmt.Sprintf("s-%d", n%64), Sequence: n,
							Type: "session.state_changed.v1", Time: now, Tenant: "acme", Data: benchData,
						}
					}
					if _, err := s.Append(ctx, batch); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(seq.Load())/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// BenchmarkReadBack10k reads a 10,000-entry session back in pages of 1000.
func BenchmarkReadBack10k(b *testing.B) {
	for _, o := range storetest.All {
		b.Run(o.Name, func(b *testing.B) {
			s := o.Open(b)
			ctx := context.Background()
			var batch []store.Entry
			for i := range 10_000 {
				batch = append(batch, store.Entry{
					ID: fmt.Sprintf("ev-%d", i), SessionID: "long", Sequence: int64(2*i + 1),
					Type: "session.state_changed.v1", Time: time.Now(), Data: benchData,
				})
				// Another session interleaved, as in a shared stream.
				batch = append(batch, store.Entry{
					ID: fmt.Sprintf("other-%d", i), SessionID: "other", Sequence: int64(2*i + 2),
					Type: "session.state_changed.v1", Time: time.Now(), Data: benchData,
				})
			}
			if _, err := s.Append(ctx, batch); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				q := store.Query{SessionID: "long", PageSize: 1000}
				n := 0
				for {
					page, next, err := s.List(ctx, q)
					if err != nil {
						b.Fatal(err)
					}
					n += len(page)
					if next == "" {
						break
					}
					q.PageToken = next
				}
				if n != 10_000 {
					b.Fatalf("read %d entries", n)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/session")
		})
	}
}
