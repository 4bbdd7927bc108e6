package clusterprovider

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/clusterstack"
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
		Local:   m.GetAnnotations()[v1alpha1.LocalNameAnnotation],
		Legacy:  boundTo(m) != "" || instance != "" || url != "",
		Created: m.GetCreationTimestamp().Time}
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
// its own name (hasHere), so it keeps that name if no other holds it; only then.
// The names this instance gave in binds its informer does not show yet are held too.
// l.bind.mu is held.
func (l *Loop) chooseLocalName(u *unstructured.Unstructured, legacy bool) (string, error) {
	others, err := l.localNamesHeld()
	if err != nil {
		return "", err
	}
	c := candidateOf(u)
	c.Legacy = legacy
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
	shown := make(map[types.UID]string, len(objs)) // uid -> the local name it shows bound ("" if none)
	for _, o := range objs {
		if ou, ok := o.(*unstructured.Unstructured); ok {
			c := candidateOf(ou)
			others = append(others, c)
			if boundTo(ou) != "" {
				shown[ou.GetUID()] = c.Local
			} else {
				shown[ou.GetUID()] = ""
			}
		}
	}
	for uid, name := range l.bind.local {
		if local, there := shown[uid]; local == name || !there {
			delete(l.bind.local, uid) // the informer shows it bound with it, or it is gone
			continue
		}
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
// hand. The name whose DataDir (or staged restore) is here and is not another's is kept
// (the bare one, or one of its hashed ones); with none here, a name is chosen as for a
// new Cluster. A conflict is no news: the change's event brings the next pass.
func (l *Loop) recordLocalName(ctx context.Context, u *unstructured.Unstructured) error {
	l.bind.mu.Lock()
	defer l.bind.mu.Unlock()
	b := u.DeepCopy()
	name := ""
	for salt := -1; salt < 4 && name == ""; salt++ {
		try := u.GetName()
		if salt >= 0 {
			try = localname.Hashed(u.GetNamespace(), u.GetName(), salt)
		}
		owner := identitystore.Owner(l.P.tenantSpec(try).Layout())
		here := exists(l.P.DataDir(try)) && (owner == "" || owner == string(u.GetUID())) || exists(l.P.restoreDir(try))
		if here && !l.localNameHeld(u, try) {
			name = try
		}
	}
	var err error
	if name == "" {
		if name, err = l.chooseLocalName(u, false); err != nil {
			return err
		}
	}
	written, err := l.writeLocalName(ctx, b, name)
	if err != nil {
		l.Log.Warn("local name not recorded; trying again", "cluster", b.GetNamespace()+"/"+b.GetName(), "err", err)
		return err
	}
	if written {
		l.Log.Info("local name recorded", "cluster", b.GetNamespace()+"/"+b.GetName(), "local", name)
	}
	return nil
}

// writeLocalName records name on the Cluster in b (a copy), in an update with its
// resourceVersion; false: not written, and no news (a conflict, or the Cluster is gone:
// the change's event brings the next pass).
func (l *Loop) writeLocalName(ctx context.Context, b *unstructured.Unstructured, name string) (bool, error) {
	withLocalName(b, name)
	_, err := l.Front.Resource(ClustersResource).Namespace(b.GetNamespace()).Update(ctx, b, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// LocalNameTaken is the Ready reason of a Cluster whose recorded local name is another
// Cluster's on this host (its DataDir says whose it is, or an older Cluster shows it):
// nothing is done for it.
const LocalNameTaken = "LocalNameTaken"

// claimLocalName says whether the Cluster may use its recorded local name on this host
// (localname.MayUse): what the name's DataDir records (each bring-up records its Cluster's
// uid there, ownDataDir), whether that Cluster is still on the front, the name this
// instance knows the Cluster by (knownLocalName), and the other Clusters that show it.
func (l *Loop) claimLocalName(cl *v1alpha1.Cluster, known string) bool {
	local := localName(cl)
	owner := identitystore.Owner(l.P.tenantSpec(local).Layout())
	ownerLive := owner != "" && owner != string(cl.UID) && l.clusterOfUID(owner) != nil
	showing, _ := l.clusterIndex.ByIndex(byLocal, local)
	others := make([]localname.Cluster, 0, len(showing))
	for _, o := range showing {
		if ou, ok := o.(*unstructured.Unstructured); ok {
			others = append(others, candidateOf(ou))
		}
	}
	c := localNameCandidate(cl, cl.Status.Instance, cl.Status.URL)
	c.Local = local
	return localname.MayUse(c, owner, ownerLive, known, others)
}

// knownLocalName is the local name this instance knows the Cluster by, if any: the one this
// run has used, or the one whose DataDir here records the Cluster's uid. A recorded name
// that differs was changed by hand (restoreLocalName sets it back).
func (l *Loop) knownLocalName(cl *v1alpha1.Cluster, st *runState) string {
	l.mu.Lock()
	known, uid := st.local, st.uid
	l.mu.Unlock()
	if known != "" && uid == cl.UID { // the state of a Cluster of the key deleted and made again is not this one's
		return known
	}
	return l.ownedDataDir(cl.UID)
}

// dataDirOwners is which DataDir here records which Cluster uid (identitystore.Owners),
// made at its first use.
func (l *Loop) dataDirOwners() *identitystore.Owners {
	l.ownersOnce.Do(func() {
		l.owners = identitystore.NewOwners(filepath.Join(l.P.cfg.DataRoot, "clusters"),
			func(name string) clusterstack.Layout { return l.P.tenantSpec(name).Layout() })
	})
	return l.owners
}

// ownedDataDir is the local name whose DataDir here records uid as its owner; "" when
// none does.
func (l *Loop) ownedDataDir(uid types.UID) string { return l.dataDirOwners().Of(string(uid)) }

// ownDataDir records, after a bring-up or an adoption, that the cluster's DataDir is the
// Cluster of uid's.
func (l *Loop) ownDataDir(c *Cluster, uid types.UID) {
	if uid == "" {
		return
	}
	if err := l.dataDirOwners().Record(c.Name, string(uid)); err != nil {
		l.Log.Warn("the DataDir's owner not recorded; recorded at the next start", "cluster", c.Name, "err", err)
	}
}

// restoreLocalName sets the local name of the Cluster in u back to local, the one this
// instance knows it by, in an update with its resourceVersion: the annotation was changed
// by hand, and what the Cluster has here (its processes, port and DataDir) carries the
// name it had. A conflict is no news.
func (l *Loop) restoreLocalName(ctx context.Context, u *unstructured.Unstructured, local string) error {
	written, err := l.writeLocalName(ctx, u.DeepCopy(), local)
	if written {
		l.Log.Warn("the local name was changed by hand: set back", "cluster", u.GetNamespace()+"/"+u.GetName(), "local", local, "was", localName(u))
	}
	return err
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
		Message: fmt.Sprintf("its local name %q (annotation %s) is another Cluster's on this host: remove the annotation, and the provider records this Cluster's own",
			localName(cl), v1alpha1.LocalNameAnnotation)}}
	l.writeStatus(ctx, cl, &runState{}, 0, r, nil)
	return nil
}
