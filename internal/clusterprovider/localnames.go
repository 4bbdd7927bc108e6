package clusterprovider

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/identitystore"
	"socialweb.computer/kcp/internal/localname"
	"socialweb.computer/kcp/internal/materialiser"
)

// A Cluster's name is unique only in its namespace; what the provider makes of it on a
// host (DataDir, port lease, OS user, control groups, node names, providerIDs, its name at
// the front door) is keyed by its local name (internal/localname), recorded on it when it
// is first bound and never changed. Every Provider call takes the local name; every
// object on the front (the kubeconfig and identity Secrets, events) the Cluster's own.

// LocalNameOf is a Cluster's local name, for the commands that find its DataDir.
func LocalNameOf(m metav1.Object) string { return localName(m) }

// localName is a Cluster's local name: the one recorded on it, or, before one is (a
// Cluster not bound yet, or bound by a provider from before local names), its own name,
// which is what such a provider gave it.
func localName(m metav1.Object) string {
	if n := m.GetAnnotations()[v1alpha1.LocalNameAnnotation]; n != "" {
		return n
	}
	return m.GetName()
}

// localNameCandidate is what localname.Choose reads of a Cluster on the front, with its
// status.instance and status.url. Legacy: it ran before local names were recorded (bound,
// or its status says it ran somewhere).
func localNameCandidate(m metav1.Object, instance, url string) localname.Cluster {
	return localname.Cluster{Namespace: m.GetNamespace(), Name: m.GetName(), UID: string(m.GetUID()),
		Local:  m.GetAnnotations()[v1alpha1.LocalNameAnnotation],
		Legacy: boundTo(m) != "" || instance != "" || url != ""}
}

func candidateOf(u *unstructured.Unstructured) localname.Cluster {
	instance, _, _ := unstructured.NestedString(u.Object, "status", "instance")
	url, _, _ := unstructured.NestedString(u.Object, "status", "url")
	return localNameCandidate(u, instance, url)
}

// ChooseLocalName is the local name for cl, about to be declared with a restore staged
// for it on this host, among all (every Cluster on the front): the name a new Cluster
// gets. The staging is keyed by it and the Cluster asks for it (its annotation); its bind
// gives it, chosen alike from the same view (chooseLocalName). A view changed meanwhile
// gives another name, and the restore waits in vain, saying so.
func ChooseLocalName(cl *v1alpha1.Cluster, all []v1alpha1.Cluster) string {
	others := make([]localname.Cluster, 0, len(all))
	for i := range all {
		o := &all[i]
		others = append(others, localNameCandidate(o, o.Status.Instance, o.Status.URL))
	}
	return localname.Choose(localNameCandidate(cl, cl.Status.Instance, cl.Status.URL), others)
}

// chooseLocalName is the local name for the Cluster in u, which has none recorded, among
// every Cluster the informer shows. legacy: something of it is on this host already under
// its own name (hasHere), so it keeps that name if no other holds it.
// The names this instance gave in binds its informer does not show yet are held too.
// l.bind.mu is held.
func (l *Loop) chooseLocalName(u *unstructured.Unstructured, legacy bool) (string, error) {
	others, err := l.localNamesHeld()
	if err != nil {
		return "", err
	}
	c := candidateOf(u)
	c.Legacy = c.Legacy || legacy
	name := localname.Choose(c, others)
	// A name asked for (a restore staged for it chose it, ChooseLocalName) is given when it
	// is the one a new Cluster gets: the staging may be here already, or not yet.
	if asked := u.GetAnnotations()[v1alpha1.LocalNameAnnotation]; asked != "" && asked != name {
		c.Legacy = false
		if localname.Choose(c, others) == asked {
			name = asked
		}
	}
	return name, nil
}

// localNamesHeld is every Cluster the informer shows, and this instance's binds it does
// not show yet, as localname.Choose reads them. l.bind.mu is held.
func (l *Loop) localNamesHeld() ([]localname.Cluster, error) {
	objs, err := l.lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	others := make([]localname.Cluster, 0, len(objs)+len(l.bind.local))
	for _, o := range objs {
		if ou, ok := o.(*unstructured.Unstructured); ok {
			others = append(others, candidateOf(ou))
		}
	}
	for uid, name := range l.bind.local {
		others = append(others, localname.Cluster{UID: string(uid), Local: name, Legacy: true})
	}
	return others, nil
}

// localNameHeld says whether a Cluster other than the one in u holds local.
func (l *Loop) localNameHeld(u *unstructured.Unstructured, local string) bool {
	holders, _ := l.clusterIndex.ByIndex(byLocal, local)
	for _, o := range holders {
		if ou, ok := o.(*unstructured.Unstructured); ok && ou.GetUID() != u.GetUID() && candidateOf(ou).Legacy {
			return true
		}
	}
	return false
}

// withLocalName records name as the local name of the Cluster in u (a copy to write).
func withLocalName(u *unstructured.Unstructured, name string) {
	a := u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[v1alpha1.LocalNameAnnotation] = name
	u.SetAnnotations(a)
}

// recordLocalName records the local name of a Cluster bound here without one, in an
// update with its resourceVersion: one bound by a provider from before local names, whose
// DataDir, port and processes carry its bare name, or one whose annotation was removed by
// hand. The name whose DataDir is here is kept, if no other Cluster holds it; else one is
// chosen. A conflict is no news: the change's event brings the next pass.
func (l *Loop) recordLocalName(ctx context.Context, u *unstructured.Unstructured) error {
	l.bind.mu.Lock()
	defer l.bind.mu.Unlock()
	b := u.DeepCopy()
	name, err := l.chooseLocalName(u, true)
	if err != nil {
		return err
	}
	if !exists(l.P.DataDir(name)) {
		for salt := range 4 {
			if h := localname.Hashed(u.GetNamespace(), u.GetName(), salt); exists(l.P.DataDir(h)) && !l.localNameHeld(u, h) {
				name = h
				break
			}
		}
	}
	withLocalName(b, name)
	_, err = l.Front.Resource(ClustersResource).Namespace(b.GetNamespace()).Update(ctx, b, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		l.Log.Warn("local name not recorded; trying again", "cluster", b.GetNamespace()+"/"+b.GetName(), "err", err)
		return err
	}
	if err == nil {
		l.Log.Info("local name recorded", "cluster", b.GetNamespace()+"/"+b.GetName(), "local", name)
	}
	return nil
}

// LocalNameTaken is the Ready reason of a Cluster whose recorded local name is another
// live Cluster's on this host (its DataDir says whose it is): nothing is done for it.
const LocalNameTaken = "LocalNameTaken"

// claimLocalName says whether the Cluster may use its local name on this host, and makes
// the DataDir say whose it is. A DataDir records the uid of its Cluster (identitystore's
// owner file): one that records another Cluster that still exists is that Cluster's, and
// the annotation that led here was set by hand (or copied with the object): the Cluster is
// refused, so that no Cluster takes another's data, processes or port by naming them. One
// that records a Cluster gone is a leftover, handled as before (an external cluster's copy
// is removed before its bring-up). One that records nothing (made before owners were
// recorded, or just now) is marked as this Cluster's, while no bring-up or teardown is
// under way in it. A local name other than the one this run has known the Cluster by is
// refused too: the annotation was changed by hand.
func (l *Loop) claimLocalName(cl *v1alpha1.Cluster, st *runState) (bool, error) {
	l.mu.Lock()
	known := st.local
	l.mu.Unlock()
	if known != "" && known != localName(cl) {
		return false, nil // recorded once, never changed: this run knows it by another
	}
	layout := l.P.tenantSpec(localName(cl)).Layout()
	switch owner := identitystore.Owner(layout); {
	case owner == string(cl.UID):
		return true, nil
	case owner != "":
		return l.clusterOfUID(owner) == nil, nil
	}
	l.mu.Lock()
	quiet := st.group == materialiser.GroupUp || st.group == materialiser.GroupAbsent && !st.stopping
	l.mu.Unlock()
	if quiet && cl.DeletionTimestamp == nil && exists(layout.Root) {
		return true, identitystore.SetOwner(layout, string(cl.UID))
	}
	return true, nil
}

// clusterOfUID is the Cluster of uid on the front, or nil.
func (l *Loop) clusterOfUID(uid string) metav1.Object {
	objs, _ := l.lister.List(labels.Everything())
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil && string(m.GetUID()) == uid {
			return m
		}
	}
	return nil
}

// refuseLocalName marks a Cluster whose local name is another's, and lets a deleted one
// go without touching anything of that other.
func (l *Loop) refuseLocalName(ctx context.Context, cl *v1alpha1.Cluster) error {
	if cl.DeletionTimestamp != nil {
		if slices.Contains(cl.Finalizers, v1alpha1.TeardownFinalizer) {
			return l.setFinalizer(ctx, ClustersResource, &cl.ObjectMeta, v1alpha1.TeardownFinalizer, false, nil)
		}
		return nil
	}
	r := materialiser.Result{Phase: materialiser.PhaseUnavailable, Ready: materialiser.Condition{Reason: LocalNameTaken,
		Message: fmt.Sprintf("its local name %q (annotation %s) was changed by hand, or is another Cluster's on this host: remove the annotation, and the provider records this Cluster's own",
			localName(cl), v1alpha1.LocalNameAnnotation)}}
	l.writeStatus(ctx, cl, &runState{}, 0, r, nil)
	return nil
}
