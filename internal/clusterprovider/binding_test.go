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
	idx.Add(boundCluster("default", "new", "u-new", "")) // bound here, the informer behind
	idx.Add(boundCluster("team", "old", "u-old2", ""))   // a Cluster of the name made again
	now := time.Now()
	leases := []instancelease.Lease{
		{Name: "host-a", Renewed: now, Report: instancelease.Report{Capacity: 3}},
		{Name: "host-b", Renewed: now, Report: instancelease.Report{Capacity: placement.Unlimited}},
	}
	l := &Loop{Instance: "host-a", Log: slog.New(slog.DiscardHandler), clusterIndex: idx,
		Instances: func(context.Context) ([]instancelease.Lease, error) { return leases, nil }}
	l.bind.pending = map[types.UID]string{"u-new": "default/new", "u-a1": "default/a1", "u-old": "team/old", "u-gone": "default/gone"}
	view, err := l.instanceView(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if view[0].Name != "host-a" || view[0].Bound != 2 || view[1].Bound != 1 {
		t.Fatalf("view %+v: want host-a with a1 and the pending new (2), host-b with b1 (1)", view)
	}
	if len(l.bind.pending) != 1 || l.bind.pending["u-new"] == "" {
		t.Errorf("pending after the view: %v; want only new", l.bind.pending)
	}
	if d := placement.Place(view, placement.Need{}); d.Instance != "host-b" {
		t.Errorf("placed on %q; want host-b, which has more room", d.Instance)
	}
}

// A Cluster an earlier version ran here is this instance's without a decision: its status
// names this instance or a name it had; a local one whose DataDir is here. An external one's
// DataDir here is only a copy, maybe of another Cluster of the name: it decides nothing.
func TestWhatIsHereIsBoundHere(t *testing.T) {
	root := t.TempDir()
	p := &Provider{cfg: Config{DataRoot: root}}
	l := &Loop{Instance: "vm", FormerNames: []string{"vm.example"}, P: p}
	for _, c := range []struct {
		status, datastore string
		dataDir, want     bool
	}{
		{"vm", "", false, true},
		{"vm.example", "", false, true},
		{"other", "", false, false},
		{"", "", true, true},
		{"", v1alpha1.DatastoreExternal, true, false},
		{"vm", v1alpha1.DatastoreExternal, false, true},
	} {
		name := "c"
		if c.dataDir {
			if err := os.MkdirAll(p.DataDir(name), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterSpec{Datastore: c.datastore}, Status: v1alpha1.ClusterStatus{Instance: c.status}}
		if got := l.hasHere(cl); got != c.want {
			t.Errorf("status.instance %q, datastore %q, DataDir here %v: here %v, want %v", c.status, c.datastore, c.dataDir, got, c.want)
		}
		os.RemoveAll(p.DataDir(name))
	}
}
