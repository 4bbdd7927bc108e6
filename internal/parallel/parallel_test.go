package parallel

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every item is done, never more than n at once, and every error comes back.
func TestEachBoundsAndJoins(t *testing.T) {
	items := make([]int, 40)
	for i := range items {
		items[i] = i
	}
	var running, most atomic.Int32
	var mu sync.Mutex
	seen := map[int]bool{}
	// Every do waits until n run together before it ends, so the bound is reached, not
	// merely not exceeded by luck; a bound never reached fails at the deadline.
	const n = 3
	gate := make(chan struct{})
	var once sync.Once
	err := Each(n, items, func(i int) error {
		r := running.Add(1)
		for {
			m := most.Load()
			if r <= m || most.CompareAndSwap(m, r) {
				break
			}
		}
		if r == n {
			once.Do(func() { close(gate) })
		}
		select {
		case <-gate:
		case <-time.After(time.Minute):
			return fmt.Errorf("item %d: %d never ran at once", i, n)
		}
		mu.Lock()
		seen[i] = true
		mu.Unlock()
		running.Add(-1)
		if i%10 == 0 {
			return fmt.Errorf("item %d failed", i)
		}
		return nil
	})
	if len(seen) != len(items) {
		t.Fatalf("%d of %d items done", len(seen), len(items))
	}
	if most.Load() != n {
		t.Fatalf("at most %d ran at once, want %d", most.Load(), n)
	}
	for _, i := range []int{0, 10, 20, 30} {
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("item %d failed", i)) {
			t.Fatalf("error %v lacks item %d's", err, i)
		}
	}
}
