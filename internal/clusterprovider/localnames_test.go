package clusterprovider

import (
	"log/slog"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/identitystore"
	"socialweb.computer/kcp/internal/localname"
	"socialweb.computer/kcp/internal/portallocator"
)

// A DataDir says whose it is: a Cluster whose local name leads to another live Cluster's
// DataDir is refused; one that says nothing goes to the oldest Cluster showing the name, so
// a copy never takes the original's; a gone Cluster's leftover refuses nobody. A Cluster
// whose annotation was changed is known by the DataDir it owns.
func TestALocalNameLeadsOnlyToItsOwnDataDir(t *testing.T) {
	p, err := New(Config{DataRoot: t.TempDir(), Ports: portallocator.Range{First: 40000, Last: 40009}})
	if err != nil {
		t.Fatal(err)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byLocal: indexByLocal})
	l := &Loop{P: p, lister: cache.NewGenericLister(idx, ClustersResource.GroupResource()), clusterIndex: idx, Log: slog.New(slog.DiscardHandler)}
	layout := p.tenantSpec("prod").Layout()
	if err := os.MkdirAll(layout.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	cluster := func(ns, name, uid string, age time.Duration) *v1alpha1.Cluster {
		cl := &v1alpha1.Cluster{}
		cl.Namespace, cl.Name, cl.UID = ns, name, types.UID(uid)
		cl.Annotations = map[string]string{v1alpha1.LocalNameAnnotation: "prod"}
		cl.Labels = map[string]string{v1alpha1.InstanceLabel: "here"} // bound: it holds its name
		cl.CreationTimestamp = metav1.NewTime(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC).Add(-age))
		u, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(cl)
		idx.Add(&unstructured.Unstructured{Object: u})
		return cl
	}
	victim := cluster("team-a", "prod", "u-victim", time.Hour)
	thief := cluster("team-b", "x", "u-thief", time.Minute)

	// Nothing recorded yet (a DataDir from before owners were): the older one's, unless
	// this run knows the younger by it.
	if !l.claimLocalName(victim, "") || l.claimLocalName(thief, "") {
		t.Errorf("a DataDir that says nothing: victim %v, thief %v; want the victim's only", l.claimLocalName(victim, ""), l.claimLocalName(thief, ""))
	}
	if !l.claimLocalName(thief, "prod") {
		t.Error("a Cluster this run knows by its name was refused")
	}
	l.ownDataDir(&Cluster{Name: "prod", Spec: p.tenantSpec("prod")}, victim.UID)
	if identitystore.Owner(layout) != "u-victim" {
		t.Fatalf("owner after the victim's bring-up: %q", identitystore.Owner(layout))
	}
	if !l.claimLocalName(victim, "") || l.claimLocalName(thief, "") || l.claimLocalName(thief, "prod") {
		t.Error("a DataDir that says whose it is: claimed by another")
	}
	// The victim's annotation changed by hand: it is known by the DataDir it owns.
	if got := l.knownLocalName(victim, &runState{}); got != "prod" {
		t.Errorf("the victim is known by %q, want prod", got)
	}
	if got := l.knownLocalName(thief, &runState{}); got != "" {
		t.Errorf("the thief is known by %q, want nothing", got)
	}
	if got := l.knownLocalName(thief, &runState{local: "x-0a1b2c3d", uid: thief.UID}); got != "x-0a1b2c3d" {
		t.Errorf("a Cluster this run knows: %q", got)
	}
	if got := l.knownLocalName(thief, &runState{local: "x-0a1b2c3d", uid: "u-deleted"}); got != "" {
		t.Errorf("the state of a Cluster of the key deleted and made again: known by %q", got)
	}
	// The victim gone, its DataDir left: a leftover refuses nobody.
	u, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(victim)
	idx.Delete(&unstructured.Unstructured{Object: u})
	if !l.claimLocalName(thief, "") {
		t.Error("a leftover of a Cluster gone refused the next one")
	}
}

// A name this instance just gave, in a bind its informer does not show yet, is held: two
// binds in a row never give one name twice. A name a restore asked for is given when it is
// what a new Cluster gets, whether or not its staging is here yet; never another's.
func TestLocalNamesJustGivenAreHeld(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	l := &Loop{lister: cache.NewGenericLister(idx, ClustersResource.GroupResource())}
	idx.Add(boundCluster("acct", "prod", "u-legacy", "")) // bound and named: the informer does not show it yet
	l.bind.local = map[types.UID]string{"u-legacy": "prod", "u-gone": "gone"}
	fresh := boundCluster("default", "prod", "u-new", "")
	if got, _ := l.chooseLocalName(fresh, false); got != localname.Hashed("default", "prod", 0) {
		t.Errorf("default/prod while prod was just given: %q", got)
	}
	if _, ok := l.bind.local["u-gone"]; ok || l.bind.local["u-legacy"] != "prod" {
		t.Errorf("names held after a choice: %v; want the gone one's dropped, the other kept", l.bind.local)
	}
	asking := boundCluster("acct", "prod", "u-acct", "")
	asking.SetAnnotations(map[string]string{v1alpha1.LocalNameAnnotation: localname.Hashed("acct", "prod", 0)})
	for _, legacy := range []bool{false, true} { // the staging not here yet, or here
		if got, _ := l.chooseLocalName(asking, legacy); got != localname.Hashed("acct", "prod", 0) {
			t.Errorf("a restore's asked name, staging here %v: given %q", legacy, got)
		}
	}
	asking.SetAnnotations(map[string]string{v1alpha1.LocalNameAnnotation: "prod"})
	if got, _ := l.chooseLocalName(asking, false); got == "prod" {
		t.Error("a name another holds was given because it was asked for")
	}
}
