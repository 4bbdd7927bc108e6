package clusterprovider

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/identitystore"
	"socialweb.computer/kcp/internal/instancelease"
	"socialweb.computer/kcp/internal/localname"
	"socialweb.computer/kcp/internal/placement"
)

// Several instances (one serve per host) may share one front. Each Cluster is bound to
// one of them by the label v1alpha1.InstanceLabel, and only that instance touches it: its
// finalizer, status, processes, data. Binding is pull: an instance binds a Cluster only to
// itself, when placement (a pure function of the same view every instance reads) names
// it, in an update that carries the Cluster's resourceVersion, so of two instances that
// both decide to take a Cluster one write fails, and an instance's count of what is bound
// to it, which it alone raises, never runs past its capacity.

// Instances is the front's view of the provider instances: their Leases
// (instancelease.List). Nil: this loop is the only instance, and binds every Cluster to
// itself.
type Instances func(ctx context.Context) ([]instancelease.Lease, error)

// placeAgain is how soon a Cluster that was not bound here is looked at again: the
// instance placement named may never take it (its view differs, or it is gone), and room
// frees up elsewhere without an event on this Cluster.
const placeAgain = 2 * time.Second

// instancesTTL is how long a read of the instances' Leases serves the passes that follow:
// a burst of new Clusters reads the front once, not once each.
const instancesTTL = time.Second

// binding is what a loop keeps of its bindings: the Clusters it bound that its informer
// may not show bound yet, and the last read of the instances.
type binding struct {
	mu      sync.Mutex
	pending map[types.UID]string // bound here, not yet shown bound by the informer: uid -> namespace/name
	local   map[types.UID]string // of those, the local names given: uid -> local name
	read    time.Time
	leases  []instancelease.Lease
}

// boundTo is the instance a Cluster is bound to; "" when none.
func boundTo(u metav1.Object) string { return u.GetLabels()[v1alpha1.InstanceLabel] }

// place decides where the unbound Cluster in u goes and, when it is here, binds it. A
// Cluster an earlier version of the provider ran here (its status names this instance or
// one of its former names, or its data, or a restore staged for it, is on this host) is
// bound here without a decision: a local datastore pins its cluster to its host, and an
// upgrade must not move it. It returns when to look again.
func (l *Loop) place(ctx context.Context, u *unstructured.Unstructured, cl *v1alpha1.Cluster) (time.Duration, error) {
	if cl.DeletionTimestamp != nil && len(cl.Finalizers) == 0 {
		return 0, nil // nothing was made for it: it goes by itself
	}
	l.bind.mu.Lock()
	defer l.bind.mu.Unlock() // one decision at a time: what it counts as bound here is exact
	here := l.hasHere(cl)
	if !here && l.Instances != nil {
		view, err := l.instanceView(ctx)
		if err != nil {
			return 0, err
		}
		if ranElsewhere(cl, view) {
			return placeAgain, nil // the instance its data is on binds it back; no decision here
		}
		switch d := placement.Place(view, needOf(cl)); d.Instance {
		case l.Instance:
		case "":
			l.unplaced(ctx, cl, d)
			return placeAgain, nil
		default:
			return placeAgain, nil // the instance named takes it; looked at again in case it does not
		}
	}
	if err := l.bindHere(ctx, u, here); err != nil {
		return 0, err
	}
	l.Log.Info("bound here", "cluster", cl.Namespace+"/"+cl.Name, "instance", l.Instance)
	return 0, nil
}

// hasHere says whether something of the Cluster is on this host already: its status names
// this instance (or a name it had), or its DataDir or a restore staged for it is here.
func (l *Loop) hasHere(cl *v1alpha1.Cluster) bool {
	if cl.Status.Instance != "" && (cl.Status.Instance == l.Instance || slices.Contains(l.FormerNames, cl.Status.Instance)) {
		return true
	}
	if cl.Spec.Datastore == v1alpha1.DatastoreExternal {
		return false // its data is on the server: a DataDir here is a copy, maybe of another Cluster of the name
	}
	// A DataDir or a staging under the name of a Cluster with no local name yet is its own
	// only in the default namespace, or when its status says it ran (from before local
	// names); in another it may be another namespace's Cluster of the name.
	if _, named := cl.Annotations[v1alpha1.LocalNameAnnotation]; !named && cl.Namespace != localname.DefaultNamespace && cl.Status.URL == "" {
		return false
	}
	layout := l.P.tenantSpec(localName(cl)).Layout()
	if owner := identitystore.Owner(layout); owner != "" && owner != string(cl.UID) {
		return false // another Cluster's, as its DataDir says
	}
	return exists(layout.Root) || exists(l.P.restoreDir(localName(cl)))
}

// bindHere binds the Cluster in u to this instance, in an update that carries its
// resourceVersion, and records its local name at its first bind (legacy: something of it
// is here under its own name already). A conflict (another instance bound it first, or it
// changed) is no news: its event brings the next pass. Any other failure is logged, since
// the pass that returns it is only retried. l.bind.mu is held.
func (l *Loop) bindHere(ctx context.Context, u *unstructured.Unstructured, legacy bool) error {
	b := u.DeepCopy()
	// A recorded name is kept (a rebind). One only asked for (a restore staged here asks
	// for the name it chose alike) is given only if it is the one chosen: a Cluster cannot
	// take another's DataDir by naming it.
	chosen := ""
	if asked := b.GetAnnotations()[v1alpha1.LocalNameAnnotation]; asked == "" || boundTo(b) == "" {
		name, err := l.chooseLocalName(u, legacy)
		if err != nil {
			return err
		}
		if asked != "" && asked != name {
			l.Log.Warn("the local name asked for is not given", "cluster", b.GetNamespace()+"/"+b.GetName(), "asked", asked, "given", name)
		}
		withLocalName(b, name)
		chosen = name
	}
	labels := b.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1alpha1.InstanceLabel] = l.Instance
	b.SetLabels(labels)
	annotations := b.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[v1alpha1.EpochAnnotation] = strconv.FormatInt(epochOf(annotations)+1, 10)
	b.SetAnnotations(annotations)
	_, err := l.Front.Resource(ClustersResource).Namespace(b.GetNamespace()).Update(ctx, b, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		return err
	case err != nil:
		l.Log.Warn("not bound here; trying again", "cluster", b.GetNamespace()+"/"+b.GetName(), "err", err)
		return err
	}
	if l.bind.pending == nil {
		l.bind.pending = map[types.UID]string{}
	}
	l.bind.pending[b.GetUID()] = b.GetNamespace() + "/" + b.GetName()
	if chosen != "" {
		if l.bind.local == nil {
			l.bind.local = map[types.UID]string{}
		}
		l.bind.local[b.GetUID()] = chosen // held until the informer shows it
	}
	return nil
}

// instanceView is every instance for placement: its Lease (read at most once per
// instancesTTL) and the Clusters bound to it now, this instance's own binds included
// before its informer shows them (and forgotten once it does, or once they are gone).
// l.bind.mu is held.
func (l *Loop) instanceView(ctx context.Context) ([]placement.Instance, error) {
	now := time.Now()
	if now.Sub(l.bind.read) > instancesTTL {
		leases, err := l.Instances(ctx)
		if err != nil {
			l.Log.Warn("the instances' leases not read; trying again", "err", err)
			return nil, err
		}
		l.bind.leases, l.bind.read = leases, now
	}
	mine, _ := l.clusterIndex.ByIndex(byInstance, l.Instance)
	indexed := map[types.UID]bool{} // counted here by the index already
	for _, o := range mine {
		m, err := meta.Accessor(o)
		if err != nil {
			continue
		}
		indexed[m.GetUID()] = true
		// The index holds unbound Clusters whose status names this instance too; only
		// one the informer shows bound here is no longer pending (its local name shown).
		if boundTo(m) == l.Instance {
			delete(l.bind.pending, m.GetUID())
			delete(l.bind.local, m.GetUID())
		}
	}
	for uid, key := range l.bind.pending {
		o, ok, _ := l.clusterIndex.GetByKey(key)
		if m, err := meta.Accessor(o); !ok || err != nil || m.GetUID() != uid {
			delete(l.bind.pending, uid) // gone (a Cluster of the name now is another)
			delete(l.bind.local, uid)
		}
	}
	view := make([]placement.Instance, 0, len(l.bind.leases))
	for _, ls := range l.bind.leases {
		bound, _ := l.clusterIndex.ByIndex(byInstance, ls.Name)
		n := len(bound)
		if ls.Name == l.Instance {
			for uid := range l.bind.pending {
				if !indexed[uid] {
					n++
				}
			}
		}
		view = append(view, ls.Instance(now, n))
	}
	return view, nil
}

// ranElsewhere says whether an unbound Cluster with a local datastore runs on another
// live instance, as its status says: its data is there, and that instance binds it back
// without a decision (hasHere). Placed anywhere else, it would start empty there.
func ranElsewhere(cl *v1alpha1.Cluster, view []placement.Instance) bool {
	if cl.Spec.Datastore == v1alpha1.DatastoreExternal || cl.Status.Instance == "" {
		return false
	}
	return slices.ContainsFunc(view, func(in placement.Instance) bool { return in.Name == cl.Status.Instance && in.Live })
}

// needOf is what a Cluster asks of its instance.
func needOf(cl *v1alpha1.Cluster) placement.Need {
	var n placement.Need
	if p := cl.Spec.Placement; p != nil {
		n.Instance = p.Instance
	}
	if r := cl.Spec.Resources; r != nil {
		n.Memory, _ = cgroups.ParseMemory(r.Memory)
	}
	n.External = cl.Spec.Datastore == v1alpha1.DatastoreExternal
	n.Teardown = cl.DeletionTimestamp != nil
	return n
}

// unplaced says on a Cluster that no instance takes it, and why. Every instance that
// decides so writes the same status (no instance in it), so two of them do not flap it.
func (l *Loop) unplaced(ctx context.Context, cl *v1alpha1.Cluster, d placement.Decision) {
	status := v1alpha1.ClusterStatus{Phase: v1alpha1.PhasePending, Conditions: slices.Clone(cl.Status.Conditions)}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse,
		Reason: d.Reason, Message: d.Message, ObservedGeneration: cl.Generation})
	if equalStatus(cl.Status, status) {
		return
	}
	cl.Status = status
	if _, err := l.updateStatus(ctx, ClustersResource, cl, &cl.ObjectMeta); err != nil {
		l.Log.Warn("status not written", "cluster", cl.Namespace+"/"+cl.Name, "err", err)
		return
	}
	l.Log.Info("not placed", "cluster", cl.Namespace+"/"+cl.Name, "reason", d.Reason, "message", d.Message)
}

// indexByInstance indexes Clusters by the instance they are bound to, or, when the binding
// is gone, by the instance their status says runs them: place binds such a Cluster back
// there, room or not, so it holds its slot meanwhile. Counted as free, that slot would go
// to a waiting Cluster in the moment between, and the rebind would run the instance past
// its capacity.
func indexByInstance(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	var status string
	if u, ok := obj.(*unstructured.Unstructured); ok {
		status, _, _ = unstructured.NestedString(u.Object, "status", "instance")
	}
	if h := v1alpha1.HoldingInstance(m.GetLabels(), status); h != "" {
		return []string{h}, nil
	}
	return nil, nil
}

const byInstance = "byInstance"

// Running is how many clusters have processes on this instance now: what its Lease
// reports.
func (l *Loop) Running() int { return len(l.runningClusters()) }

// epochOf is a Cluster's binding epoch (v1alpha1.EpochAnnotation); 0 before its first bind.
func epochOf(annotations map[string]string) int64 {
	n, _ := strconv.ParseInt(annotations[v1alpha1.EpochAnnotation], 10, 64)
	return n
}
