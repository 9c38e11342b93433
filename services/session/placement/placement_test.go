package placement

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestLocalCapacity(t *testing.T) {
	ctx := context.Background()
	l := NewLocal(Node{ID: "n1", Address: "127.0.0.1:1"}, 2)
	for _, id := range []string{"a", "b"} {
		n, err := l.Place(ctx, Request{SessionID: id})
		if err != nil || n.ID != "n1" {
			t.Fatalf("Place(%s) = %v, %v", id, n, err)
		}
	}
	// Placing a held session again is not a second reservation.
	if _, err := l.Place(ctx, Request{SessionID: "a"}); err != nil {
		t.Fatalf("Place(a) again: %v", err)
	}
	if _, err := l.Place(ctx, Request{SessionID: "c"}); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("Place(c) on a full node: %v, want ErrNoCapacity", err)
	}
	if err := l.Release(ctx, "n1", "a"); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "n1", "a"); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if err := l.Release(ctx, "other", "b"); err != nil || l.Used() != 1 {
		t.Fatalf("release on another node changed this one: used %d, err %v", l.Used(), err)
	}
	if _, err := l.Place(ctx, Request{SessionID: "c"}); err != nil {
		t.Fatalf("Place(c) after release: %v", err)
	}
}

func TestLocalConcurrentNeverOverfills(t *testing.T) {
	ctx := context.Background()
	l := NewLocal(Node{ID: "n1"}, 10)
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		ok int
	)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Place(ctx, Request{SessionID: fmt.Sprint(i)}); err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != 10 || l.Used() != 10 {
		t.Fatalf("%d placed, %d used; want 10", ok, l.Used())
	}
}

func TestSelector(t *testing.T) {
	labels := map[string]string{"zone": "a", "gpu": "no"}
	tests := []struct {
		sel  map[string]string
		want bool
	}{
		{nil, true},
		{map[string]string{"zone": "a"}, true},
		{map[string]string{"zone": "a", "gpu": "no"}, true},
		{map[string]string{"zone": "b"}, false},
		{map[string]string{"rack": "1"}, false},
	}
	l := NewLocal(Node{ID: "n1"}, 0, WithLabels(labels))
	for _, tt := range tests {
		if got := Matches(labels, tt.sel); got != tt.want {
			t.Errorf("Matches(%v) = %v", tt.sel, got)
		}
		_, err := l.Place(context.Background(), Request{SessionID: fmt.Sprint(tt.sel), NodeSelector: tt.sel})
		if (err == nil) != tt.want || (err != nil && !errors.Is(err, ErrNoMatchingNode)) {
			t.Errorf("Place with %v: %v", tt.sel, err)
		}
	}
}

func BenchmarkLocalPlaceRelease(b *testing.B) {
	ctx := context.Background()
	l := NewLocal(Node{ID: "n1"}, 1000, WithLabels(map[string]string{"zone": "a"}))
	req := Request{SessionID: "s", NodeSelector: map[string]string{"zone": "a"}}
	for b.Loop() {
		if _, err := l.Place(ctx, req); err != nil {
			b.Fatal(err)
		}
		_ = l.Release(ctx, "n1", "s")
	}
}
