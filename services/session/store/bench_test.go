package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/session/state"
	"github.com/deskgrid/deskgrid/services/session/store"
)

func BenchmarkStore(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name+"/Create", func(b *testing.B) {
			st := be.open(b)
			ctx := context.Background()
			i := 0
			for b.Loop() {
				i++
				if err := st.Create(ctx, newSession(fmt.Sprint("s-", i), base, state.Pending, map[string]string{"team": "a"}), ""); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(be.name+"/Update", func(b *testing.B) {
			st := be.open(b)
			ctx := context.Background()
			s := newSession("s-a", base, state.Running, nil)
			if err := st.Create(ctx, s, ""); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				s.Generation++
				if err := st.Update(ctx, s, s.Generation-1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(be.name+"/ListPage100of1000", func(b *testing.B) {
			st := be.open(b)
			ctx := context.Background()
			for i := range 1000 {
				team := []string{"a", "b"}[i%2]
				if err := st.Create(ctx, newSession(fmt.Sprintf("s-%04d", i), base.Add(time.Duration(i)*time.Second), state.Running, map[string]string{"team": team}), ""); err != nil {
					b.Fatal(err)
				}
			}
			f := store.Filter{PageSize: 100, Labels: map[string]string{"team": "a"}, States: []state.State{state.Running}}
			for b.Loop() {
				if page, _, err := st.List(ctx, f); err != nil || len(page) != 100 {
					b.Fatalf("%d sessions, %v", len(page), err)
				}
			}
		})
	}
}
