package clusterprovider

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/localname"
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
// for it on this host, among all (every Cluster on the front): the staging is keyed by it
// and the Cluster asks for it (its annotation). Its bind chooses alike (hasHere: the
// staging is here) from the same view, and gives it; a view changed meanwhile gives
// another name, and the restore waits in vain, saying so.
func ChooseLocalName(cl *v1alpha1.Cluster, all []v1alpha1.Cluster) string {
	others := make([]localname.Cluster, 0, len(all))
	for i := range all {
		o := &all[i]
		others = append(others, localNameCandidate(o, o.Status.Instance, o.Status.URL))
	}
	c := localNameCandidate(cl, cl.Status.Instance, cl.Status.URL)
	c.Legacy = true
	return localname.Choose(c, others)
}

// chooseLocalName is the local name for the Cluster in u, which has none recorded, among
// every Cluster the informer shows. legacy: something of it is on this host already under
// its own name (hasHere), so it keeps that name if no other holds it.
func (l *Loop) chooseLocalName(u *unstructured.Unstructured, legacy bool) (string, error) {
	objs, err := l.lister.List(labels.Everything())
	if err != nil {
		return "", err
	}
	others := make([]localname.Cluster, 0, len(objs))
	for _, o := range objs {
		if ou, ok := o.(*unstructured.Unstructured); ok {
			others = append(others, candidateOf(ou))
		}
	}
	c := candidateOf(u)
	c.Legacy = c.Legacy || legacy
	return localname.Choose(c, others), nil
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
