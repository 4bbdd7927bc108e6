package clusterprovider

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/frontdoor"
)

type fakeRouter struct{ set []frontdoor.Names }

func (r *fakeRouter) SetNames(n frontdoor.Names) { r.set = append(r.set, n) }

// clusterWithNames is a Cluster bound with local name local ("": not bound yet).
func clusterWithNames(ns, name, local string, age time.Duration, names ...string) *unstructured.Unstructured {
	u := v1alpha1.Object("Cluster", name, map[string]any{"account": "a"})
	u.SetNamespace(ns)
	if local != "" {
		u.SetAnnotations(map[string]string{v1alpha1.LocalNameAnnotation: local})
	}
	u.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-age)))
	if len(names) > 0 {
		unstructured.SetNestedStringSlice(u.Object, names, "spec", "extraNames")
	}
	return u
}

// The names a Cluster asks for reach the front door and the serving certificate; a name
// an older Cluster holds is refused with a condition naming the field; another account's
// Cluster of the same name claims by its own local name; one not bound yet claims nothing.
func TestExtraNamesAreRoutedCertifiedOrRefused(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, u := range []*unstructured.Unstructured{
		clusterWithNames("team-a", "shop", "shop", 2*time.Hour, "api.shop.example", "www.shop.example"),
		clusterWithNames("team-b", "copy", "copy", time.Hour, "api.shop.example", "copy.example"),
		clusterWithNames("team-c", "shop", "shop-0a1b2c3d", 3*time.Minute, "own.example"),
		clusterWithNames("team-d", "new", "", time.Minute, "early.example"), // not bound yet
		clusterWithNames("team-a", "plain", "plain", time.Hour),
	} {
		idx.Add(u)
	}
	objs, _ := cache.NewGenericLister(idx, ClustersResource.GroupResource()).List(labels.Everything())
	claims, hosted := Claims(objs, func(string) string { return "" })
	if len(claims) != 3 || len(hosted) != 4 {
		t.Fatalf("claims = %+v, hosted = %+v; want the claims of shop (both) and copy, and the four bound", claims, hosted)
	}

	p := &Provider{cfg: Config{FrontDoor: FrontDoor{Names: frontdoor.Names{BaseDomain: "kcp.example"}, Port: 6443}}}
	router := &fakeRouter{}
	l := &Loop{P: p, Router: router, Log: slog.New(slog.DiscardHandler), lister: cache.NewGenericLister(idx, ClustersResource.GroupResource()),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	defer l.queue.ShutDown()
	l.syncDoorNames()
	l.syncDoorNames() // unchanged: not set again
	if len(router.set) != 1 {
		t.Fatalf("the front door was given names %d times, want once", len(router.set))
	}
	if c, ok := router.set[0].Cluster("api.shop.example"); !ok || c != "shop" {
		t.Errorf("api.shop.example routes to %q, %v", c, ok)
	}
	if c, ok := router.set[0].Cluster("own.example"); !ok || c != "shop-0a1b2c3d" {
		t.Errorf("own.example, team-c's shop's, routes to %q, %v", c, ok)
	}
	if c, ok := router.set[0].Cluster("shop.team-c.kcp.example"); !ok || c != "shop-0a1b2c3d" {
		t.Errorf("shop.team-c.kcp.example routes to %q, %v", c, ok)
	}
	if _, ok := router.set[0].Cluster("early.example"); ok {
		t.Error("a Cluster not bound yet got an extra name")
	}
	if got, want := p.servingNames("shop"), []string{"shop.kcp.example", "shop.team-a.kcp.example", "api.shop.example", "www.shop.example"}; !slices.Equal(got, want) {
		t.Errorf("shop's certificate names %v, want %v", got, want)
	}

	var conds []metav1.Condition
	l.extraNamesCondition(&conds, "copy", []string{"api.shop.example", "copy.example"}, 3)
	c := meta.FindStatusCondition(conds, ExtraNamesCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Refused" || c.ObservedGeneration != 3 ||
		c.Message != `spec.extraNames[0] "api.shop.example": is cluster shop's already (its claim is older); choose another name or remove it there first` {
		t.Errorf("copy's condition: %+v", c)
	}
	l.extraNamesCondition(&conds, "shop", []string{"api.shop.example", "www.shop.example"}, 1)
	if c := meta.FindStatusCondition(conds, ExtraNamesCondition); c.Status != metav1.ConditionTrue ||
		c.Message != "routed to this cluster and on its serving certificate: api.shop.example, www.shop.example" {
		t.Errorf("shop's condition: %+v", c)
	}
	l.extraNamesCondition(&conds, "plain", nil, 1)
	if meta.FindStatusCondition(conds, ExtraNamesCondition) != nil {
		t.Error("a Cluster with no extra names keeps the condition")
	}
	off := &Loop{P: &Provider{}}
	off.syncDoorNames()
	l2 := []metav1.Condition{}
	off.extraNamesCondition(&l2, "shop", []string{"api.shop.example"}, 1)
	if c := meta.FindStatusCondition(l2, ExtraNamesCondition); c == nil || c.Reason != "NoFrontDoor" {
		t.Errorf("without a front door: %+v", c)
	}
}

// A name given while the cluster runs: its serving certificate is minted again (the
// apiserver reloads it), once.
func TestAnExtraNameGivenWhileItRunsIsCertified(t *testing.T) {
	s := clusterstackSpec(t)
	p := &Provider{cfg: Config{FrontDoor: FrontDoor{Names: frontdoor.Names{BaseDomain: "kcp.example"}, Port: 6443}}}
	if err := EnsureCredentials(s, p.servingNames("demo"), "https://demo.kcp.example:6443", certrenewal.Policy{}); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Name: "demo", Spec: s, URL: "https://demo.kcp.example:6443", p: p, doorNames: p.servingNames("demo")}
	if minted, err := c.EnsureServingNames(); minted || err != nil {
		t.Fatalf("nothing changed, yet minted %v, %v", minted, err)
	}
	p.SetFrontDoorNames(frontdoor.Names{BaseDomain: "kcp.example", Extra: map[string]string{"api.demo.example": "demo"}})
	if minted, err := c.EnsureServingNames(); !minted || err != nil {
		t.Fatalf("a name given: minted %v, %v", minted, err)
	}
	cert, err := x509Cert(s.Layout().APIServerCert())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"api.demo.example", "demo.kcp.example", "127.0.0.1"} {
		if err := cert.VerifyHostname(h); err != nil {
			t.Errorf("serving certificate: %v", err)
		}
	}
	if minted, _ := c.EnsureServingNames(); minted {
		t.Error("minted again with the same names")
	}
}

// Two Clusters that show one local name (one's annotation set by hand): the front door
// knows the one whose DataDir says it is its, else the older, and never both.
func TestOneLocalNameIsKnownOnce(t *testing.T) {
	victim := clusterWithNames("team-a", "prod", "prod-0a1b2c3d", time.Hour)
	victim.SetUID("victim")
	thief := clusterWithNames("team-b", "shop", "prod-0a1b2c3d", 2*time.Hour, "shop.example")
	thief.SetUID("thief")
	objs := []runtime.Object{thief, victim}
	for owner, want := range map[string]string{"victim": "team-a", "": "team-b"} {
		claims, hosted := Claims(objs, func(string) string { return owner })
		if len(hosted) != 1 || hosted[0].Namespace != want {
			t.Errorf("owner %q: hosted %+v, want only %s's", owner, hosted, want)
		}
		if wantClaims := map[string]int{"team-a": 0, "team-b": 1}[want]; len(claims) != wantClaims {
			t.Errorf("owner %q: claims %+v", owner, claims)
		}
	}
}
