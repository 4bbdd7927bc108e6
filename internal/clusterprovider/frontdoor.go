package clusterprovider

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"socialweb.computer/kcp/internal/frontdoor"
	"socialweb.computer/kcp/internal/materialiser"
)

var _ frontdoor.Backends = (*Loop)(nil)

// Address is the front door's Backends: where the apiserver of the cluster of local name
// name listens now. A connection for a cluster whose bring-up is under way is held until it
// ends (or ctx does); one for a sleeping cluster asks it to wake and is held likewise;
// one for a cluster this provider runs no group of (parked, failed, exited) is refused as
// unavailable; a name no Cluster here has is frontdoor.ErrUnknownCluster.
func (l *Loop) Address(ctx context.Context, name string) (string, error) {
	for {
		l.mu.Lock()
		addr, wait, err := l.addressLocked(name)
		l.mu.Unlock()
		if wait == nil {
			return addr, err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return "", fmt.Errorf("cluster %s: still starting: %w", name, ctx.Err())
		}
	}
}

// addressLocked decides Address from the state: an address, a channel to wait on, or an
// error. The first connection for a sleeping cluster records the wake request (and its
// time, from which the wake is measured) and enqueues the cluster. l.mu is held.
func (l *Loop) addressLocked(name string) (string, <-chan struct{}, error) {
	known := false
	for key, st := range l.state {
		if st.local != name {
			continue
		}
		known = true
		switch {
		case st.group == materialiser.GroupStarting:
			return "", l.changed, nil
		case st.phase == materialiser.PhaseSleeping && (st.group == materialiser.GroupAbsent || st.group == materialiser.GroupUp):
			// Asleep, or falling asleep: its processes are (about to be) gone.
			if st.wakeSince.IsZero() {
				st.wakeSince = time.Now()
				if l.queue != nil {
					l.queue.Add(key)
				}
			}
			return "", l.changed, nil
		case st.group == materialiser.GroupUp && st.cluster != nil:
			return net.JoinHostPort(st.cluster.Spec.DialHost(), strconv.Itoa(st.cluster.Port)), nil, nil
		}
	}
	if !known {
		// Before the informers synced, or before the first pass of a Cluster that is
		// declared (a restarted provider, a Cluster just applied), no state says what it
		// is: the connection is held for that pass, not refused as no cluster's.
		if l.clusterIndex == nil {
			return "", l.changed, nil
		}
		declared, _ := l.clusterIndex.ByIndex(byLocal, name)
		for _, o := range declared {
			// One bound to another instance runs on another host, whose front door
			// serves it: this one has no cluster of the name.
			if m, err := meta.Accessor(o); err == nil && (boundTo(m) == "" || boundTo(m) == l.Instance) {
				return "", l.changed, nil
			}
		}
		return "", nil, fmt.Errorf("cluster %s: %w", name, frontdoor.ErrUnknownCluster)
	}
	return "", nil, fmt.Errorf("cluster %s is not running", name)
}
