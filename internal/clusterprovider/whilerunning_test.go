package clusterprovider

import (
	"context"
	"testing"
	"time"
)

// A guest operation must not outlive its cluster: its apiserver is gone once the cluster
// stops, and a poll on it would hold a worker forever.
func TestAGuestOperationEndsWhenItsClusterStops(t *testing.T) {
	c := &Cluster{stopping: make(chan struct{})}
	ctx, cancel := c.whileRunning(context.Background(), time.Hour)
	defer cancel()
	if ctx.Err() != nil {
		t.Fatal("ended before the cluster stopped")
	}
	close(c.stopping)
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("still running a minute after its cluster stopped")
	}
}
