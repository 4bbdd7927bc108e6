package clusterprovider

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/materialiser"
	"socialweb.computer/kcp/internal/placement"
)

// failoverCheck is how often a Cluster bound to another instance is looked at again: an
// external one is taken over once that instance's Lease has expired.
const failoverCheck = 2 * time.Second

// boundElsewhere handles a Cluster bound to another instance, owner.
//
// A local datastore pins its cluster to the host its data is on. One whose data is not
// here is none of this instance's business; one whose data is here was bound under a name
// this instance no longer has (--instance changed, or the host's name), and is bound here
// again once owner has no current Lease, never while owner is live (a label changed by
// hand: nothing is touched, and a warning says so).
//
// An external datastore's cluster may run anywhere: what this instance still has of it
// goes (letGo), and it is taken over when owner's Lease has expired (its host is gone, or
// its serve stopped and released it) and placement names this instance. The takeover is a
// rebind with the Cluster's resourceVersion, so of the live instances one takes it; its
// bring-up fences owner's processes out of the datastore (externaldb.Server.Take), should
// they still run. A deleted one is taken over the same way, for its teardown.
func (l *Loop) boundElsewhere(ctx context.Context, u *unstructured.Unstructured, cl *v1alpha1.Cluster, owner string) (time.Duration, error) {
	key := cl.Namespace + "/" + cl.Name
	external := cl.Spec.Datastore == v1alpha1.DatastoreExternal
	dataHere := exists(l.P.DataDir(localName(cl)))
	if !external && !dataHere {
		return 0, nil
	}
	if external {
		if again, err := l.letGo(key, cl, owner); again > 0 || err != nil {
			return again, err
		}
	}
	if l.Instances == nil || cl.DeletionTimestamp != nil && len(cl.Finalizers) == 0 {
		return 0, nil
	}
	l.bind.mu.Lock()
	defer l.bind.mu.Unlock()
	view, err := l.instanceView(ctx)
	if err != nil {
		return 0, err
	}
	for _, in := range view {
		if in.Name == owner && in.Live {
			if !external {
				l.Log.Warn("bound to another live instance, yet its data is on this host: left alone", "cluster", key, "boundTo", owner)
				return 10 * failoverCheck, nil
			}
			return failoverCheck, nil
		}
	}
	if external {
		if d := placement.Place(view, needOf(cl)); d.Instance != l.Instance {
			return failoverCheck, nil // another live instance takes it, or none can yet
		}
	}
	if err := l.bindHere(ctx, u, true); err != nil {
		return 0, err
	}
	if external {
		l.Metrics.failovers.Inc()
		l.Log.Info("taken over: its instance's lease expired", "cluster", key, "from", owner, "instance", l.Instance)
	} else {
		l.Log.Info("bound here again: its data is on this host, and the instance it was bound to has no current lease", "cluster", key, "from", owner, "instance", l.Instance)
	}
	return 0, nil
}

// letGo stops and forgets what this instance has of a Cluster bound to another one: its
// processes (a run that was fenced out, or one killed whose survivors a restart finds),
// its port, and, for an external datastore, its DataDir, which is only a copy here (the
// data is on the server, the identity on the front). The external data itself is never
// touched. A bring-up under way is waited for.
func (l *Loop) letGo(key string, cl *v1alpha1.Cluster, owner string) (time.Duration, error) {
	l.mu.Lock()
	st := l.state[key]
	var c *Cluster
	if st != nil {
		if st.group == materialiser.GroupStarting {
			l.mu.Unlock()
			return time.Second, nil
		}
		c = st.cluster
		st.cluster, st.group, st.stopping = nil, materialiser.GroupAbsent, true
		l.signalLocked()
	}
	l.mu.Unlock()
	log := l.Log.With("cluster", key, "boundTo", owner)
	if c != nil {
		log.Info("bound to another instance now: stopping what runs of it here; its data is not touched")
		if err := c.Stop(); err != nil {
			return 0, err
		}
	}
	local := localName(cl)
	dataHere := exists(l.P.DataDir(local))
	if port := l.leaseOf(local); port != 0 || dataHere && cl.Spec.Datastore == v1alpha1.DatastoreExternal {
		if err := l.P.ReapSurvivorsOf(local); err != nil {
			return 0, err
		}
		if err := l.releaseLease(local); err != nil {
			return 0, err
		}
		// Only a copy goes: never a DataDir that holds a datastore of its own.
		if dataHere && cl.Spec.Datastore == v1alpha1.DatastoreExternal && !l.P.HasDatastore(local) {
			if err := l.P.RemoveDataDir(local); err != nil {
				return 0, err
			}
		}
		log.Info("let go of what was left of it here", "port", port)
	}
	if st != nil {
		l.mu.Lock()
		st.stopping = false
		l.mu.Unlock()
		l.forget(key)
	}
	return 0, nil
}
