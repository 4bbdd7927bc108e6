package clusterprovider

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/identitystore"
	"socialweb.computer/kcp/internal/instancelease"
	"socialweb.computer/kcp/internal/placement"
)

func boundCluster(ns, name, uid, instance string) *unstructured.Unstructured {
	u := v1alpha1.Object("Cluster", name, map[string]any{"account": "acme"})
	u.SetNamespace(ns)
	u.SetUID(types.UID(uid))
	if instance != "" {
		u.SetLabels(map[string]string{v1alpha1.InstanceLabel: instance})
	}
	return u
}

// What an instance counts as bound to it: the Clusters its informer shows bound, and its
// own binds the informer does not show yet, each once; a pending bind is forgotten once
// the informer shows it, or once its Cluster is gone or is another Cluster of the name.
func TestTheViewCountsPendingBindsOnce(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byLocal: indexByLocal, byInstance: indexByInstance})
	idx.Add(boundCluster("default", "a1", "u-a1", "host-a"))
	idx.Add(boundCluster("default", "b1", "u-b1", "host-b"))
	idx.Add(boundCluster("default", "new", "u-new", ""))     // bound here, the informer behind
	idx.Add(boundCluster("team", "old", "u-old2", ""))       // a Cluster of the name made again
	legacy := boundCluster("default", "legacy", "u-leg", "") // bound back here, the informer behind
	unstructured.SetNestedField(legacy.Object, "host-a", "status", "instance")
	idx.Add(legacy)
	now := time.Now()
	leases := []instancelease.Lease{
		{Name: "host-a", Renewed: now, Report: instancelease.Report{Capacity: 3}},
		{Name: "host-b", Renewed: now, Report: instancelease.Report{Capacity: placement.Unlimited}},
	}
	l := &Loop{Instance: "host-a", Log: slog.New(slog.DiscardHandler), clusterIndex: idx,
		Instances: func(context.Context) ([]instancelease.Lease, error) { return leases, nil }}
	l.bind.pending = map[types.UID]string{"u-new": "default/new", "u-a1": "default/a1", "u-old": "team/old", "u-gone": "default/gone", "u-leg": "default/legacy"}
	l.bind.local = map[types.UID]string{"u-leg": "legacy-2"}
	view, err := l.instanceView(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if view[0].Name != "host-a" || view[0].Bound != 3 || view[1].Bound != 1 {
		t.Fatalf("view %+v: want host-a with a1, legacy (by its status) and the pending new (3), host-b with b1 (1)", view)
	}
	if len(l.bind.pending) != 2 || l.bind.pending["u-new"] == "" || l.bind.pending["u-leg"] == "" || l.bind.local["u-leg"] != "legacy-2" {
		t.Errorf("pending after the view: %v, local names %v; want new and legacy, legacy's name kept until the informer shows it bound", l.bind.pending, l.bind.local)
	}
	if d := placement.Place(view, placement.Need{}); d.Instance != "host-b" {
		t.Errorf("placed on %q; want host-b, which has more room", d.Instance)
	}
}

// A Cluster whose binding label is gone is bound back where its status says it runs, room
// or not: until then it still holds its slot there, so a waiting Cluster is not given that
// slot in the moment between (which would run the instance past its capacity).
func TestAClusterWithoutItsBindingStillHoldsItsSlot(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byLocal: indexByLocal, byInstance: indexByInstance})
	idx.Add(boundCluster("default", "a1", "u-a1", "host-a"))
	unbound := boundCluster("default", "b1", "u-b1", "")
	unstructured.SetNestedField(unbound.Object, "host-b", "status", "instance")
	idx.Add(unbound)
	idx.Add(boundCluster("default", "waiting", "u-w", ""))
	now := time.Now()
	leases := []instancelease.Lease{
		{Name: "host-a", Renewed: now, Report: instancelease.Report{Capacity: 1}},
		{Name: "host-b", Renewed: now, Report: instancelease.Report{Capacity: 1}},
	}
	l := &Loop{Instance: "host-a", Log: slog.New(slog.DiscardHandler), clusterIndex: idx,
		Instances: func(context.Context) ([]instancelease.Lease, error) { return leases, nil }}
	view, err := l.instanceView(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if view[0].Bound != 1 || view[1].Bound != 1 {
		t.Fatalf("view %+v: want one bound to each, b1 on host-b by its status", view)
	}
	if d := placement.Place(view, placement.Need{}); d.Reason != placement.NoRoom {
		t.Errorf("the waiting Cluster placed %+v; want NoRoom: b1 holds host-b's one slot", d)
	}
}

// A Cluster an earlier version ran here is this instance's without a decision: its status
// names this instance or a name it had; a local one whose DataDir is here, if that DataDir
// is its own: in the default namespace, under its recorded local name, or when its status
// says it ran; never one that its DataDir says is another Cluster's. An external one's
// DataDir here is only a copy, maybe of another Cluster of the name: it decides nothing.
func TestWhatIsHereIsBoundHere(t *testing.T) {
	root := t.TempDir()
	p := &Provider{cfg: Config{DataRoot: root}}
	l := &Loop{Instance: "vm", FormerNames: []string{"vm.example"}, P: p}
	for _, c := range []struct {
		ns, local, status, url, datastore, owner string
		dataDir, want                            bool
	}{
		{status: "vm", want: true},
		{status: "vm.example", want: true},
		{status: "other"},
		{ns: "default", dataDir: true, want: true},
		{ns: "acct", dataDir: true},                                           // maybe default's, or another account's
		{ns: "acct", url: "https://c.kcp.example", dataDir: true, want: true}, // it ran before local names
		{ns: "acct", local: "c", dataDir: true, want: true},
		{ns: "default", dataDir: true, owner: "u-other"},
		{ns: "default", dataDir: true, owner: "u-c", want: true},
		{ns: "default", datastore: v1alpha1.DatastoreExternal, dataDir: true},
		{status: "vm", datastore: v1alpha1.DatastoreExternal, want: true},
	} {
		name := "c"
		if c.dataDir {
			if err := os.MkdirAll(p.DataDir(name), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if c.owner != "" {
			if err := identitystore.SetOwner(p.tenantSpec(name).Layout(), c.owner); err != nil {
				t.Fatal(err)
			}
		}
		cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name, UID: "u-c"}, Spec: v1alpha1.ClusterSpec{Datastore: c.datastore},
			Status: v1alpha1.ClusterStatus{Instance: c.status, URL: c.url}}
		if c.local != "" {
			cl.Annotations = map[string]string{v1alpha1.LocalNameAnnotation: c.local}
		}
		if got := l.hasHere(cl); got != c.want {
			t.Errorf("%+v: here %v, want %v", c, got, c.want)
		}
		os.RemoveAll(p.DataDir(name))
	}
}

// An unbound Cluster whose local data is on another live instance (its status names it)
// is that instance's to bind back: no other decides for it, or it would start empty
// there. An external one, or one whose instance has no current lease, is placed as any.
func TestAnUnboundClusterIsLeftToTheInstanceItsDataIsOn(t *testing.T) {
	view := []placement.Instance{{Name: "host-a", Live: true}, {Name: "host-b", Live: true}, {Name: "gone"}}
	for _, c := range []struct {
		status, datastore string
		want              bool
	}{
		{status: "host-b", want: true},
		{status: "gone"},
		{status: "nowhere"},
		{},
		{status: "host-b", datastore: v1alpha1.DatastoreExternal},
	} {
		cl := &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{Datastore: c.datastore}, Status: v1alpha1.ClusterStatus{Instance: c.status}}
		if got := ranElsewhere(cl, view); got != c.want {
			t.Errorf("status %q, datastore %q: left to its instance %v, want %v", c.status, c.datastore, got, c.want)
		}
	}
}
