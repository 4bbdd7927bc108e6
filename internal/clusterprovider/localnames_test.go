package clusterprovider

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/identitystore"
	"socialweb.computer/kcp/internal/localname"
	"socialweb.computer/kcp/internal/materialiser"
	"socialweb.computer/kcp/internal/portallocator"
)

// A DataDir says whose it is: a Cluster whose local name leads to another live Cluster's
// DataDir is refused; a gone Cluster's leftover is not a reason to refuse; one that says
// nothing is marked as the Cluster's, but not while a bring-up may be making it.
func TestALocalNameLeadsOnlyToItsOwnDataDir(t *testing.T) {
	p, err := New(Config{DataRoot: t.TempDir(), Ports: portallocator.Range{First: 40000, Last: 40009}})
	if err != nil {
		t.Fatal(err)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	victim := boundCluster("team-a", "prod", "u-victim", "here")
	idx.Add(victim)
	l := &Loop{P: p, lister: cache.NewGenericLister(idx, ClustersResource.GroupResource())}
	layout := p.tenantSpec("prod").Layout()
	if err := os.MkdirAll(layout.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	thief := &v1alpha1.Cluster{}
	thief.Namespace, thief.Name, thief.UID = "team-b", "x", types.UID("u-thief")
	thief.Annotations = map[string]string{v1alpha1.LocalNameAnnotation: "prod"}

	starting := &runState{group: materialiser.GroupStarting}
	if ok, err := l.claimLocalName(thief, starting); !ok || err != nil || identitystore.Owner(layout) != "" {
		t.Fatalf("a DataDir that says nothing, while a bring-up may make it: %v, %v, owner %q; want claimed, not marked", ok, err, identitystore.Owner(layout))
	}
	victimCl := &v1alpha1.Cluster{}
	victimCl.Namespace, victimCl.Name, victimCl.UID = "team-a", "prod", types.UID("u-victim")
	if ok, err := l.claimLocalName(victimCl, &runState{group: materialiser.GroupUp}); !ok || err != nil || identitystore.Owner(layout) != "u-victim" {
		t.Fatalf("the victim, up: %v, %v, owner %q; want claimed and marked", ok, err, identitystore.Owner(layout))
	}
	if ok, err := l.claimLocalName(thief, &runState{group: materialiser.GroupAbsent}); ok || err != nil {
		t.Errorf("a Cluster whose annotation names another's DataDir: claimed %v, %v; want refused", ok, err)
	}
	idx.Delete(victim)
	if ok, err := l.claimLocalName(thief, &runState{group: materialiser.GroupAbsent}); !ok || err != nil {
		t.Errorf("a leftover of a Cluster gone: claimed %v, %v; want claimed", ok, err)
	}
}

// A name this instance just gave, in a bind its informer does not show yet, is held: two
// binds in a row never give one name twice. A name a restore asked for is given when it is
// what a new Cluster gets, whether or not its staging is here yet; never another's.
func TestLocalNamesJustGivenAreHeld(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	l := &Loop{lister: cache.NewGenericLister(idx, ClustersResource.GroupResource())}
	l.bind.local = map[types.UID]string{"u-legacy": "prod"}
	fresh := boundCluster("default", "prod", "u-new", "")
	if got, _ := l.chooseLocalName(fresh, false); got != localname.Hashed("default", "prod", 0) {
		t.Errorf("default/prod while prod was just given: %q", got)
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
