// Package parallel runs one function over many items with a bound on how many run at once:
// a provider stops, reaps or removes many groups and guests, and neither one at a time (a
// stop of 100 clusters would take 100 graces) nor all at once (each reap forks and waits).
package parallel

import (
	"errors"
	"sync"
)

// Each runs do for every item, at most n at once (n below 1 counts as 1), waits for all of
// them and joins their errors; one failure does not stop the others.
func Each[T any](n int, items []T, do func(T) error) error {
	errs := make([]error, len(items))
	sem := make(chan struct{}, max(n, 1))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = do(it)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
