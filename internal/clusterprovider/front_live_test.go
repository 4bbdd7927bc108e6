package clusterprovider

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/api/v1alpha1"
)

// The CRDs on a real Kubernetes API (a tenant apiserver standing in for the front, as any
// Kubernetes API given by --front-kubeconfig would): bad names and values are refused with
// a message naming the field (invariant 18); good ones are defaulted; status is a
// subresource.
func TestTheFrontRefusesBadClustersNamingTheField(t *testing.T) {
	p, _ := liveProvider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn := dynamic.NewForConfigOrDie(crdFront(ctx, t, p, "front"))
	clusters := dyn.Resource(ClustersResource).Namespace("default")
	nodes := dyn.Resource(NodesResource).Namespace("default")
	obj := v1alpha1.Object

	good, err := clusters.Create(ctx, obj("Cluster", "demo", map[string]any{"account": "acme"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a good Cluster was refused: %v", err)
	}
	spec := good.Object["spec"].(map[string]any)
	if spec["running"] != true || spec["podsPerNode"] != int64(110) {
		t.Errorf("defaults not applied: %v", spec)
	}

	for _, bad := range []struct {
		name  string
		spec  map[string]any
		field string
	}{
		{"a.b", map[string]any{"account": "acme"}, "metadata.name"},
		{strings.Repeat("a", 41), map[string]any{"account": "acme"}, "metadata.name"},
		{"x1", map[string]any{}, "spec.account"},
		{"x2", map[string]any{"account": "Acme!"}, "spec.account"},
		{"x3", map[string]any{"account": "acme", "maxNodes": -1}, "spec.maxNodes"},
		{"x4", map[string]any{"account": "acme", "podsPerNode": 0}, "spec.podsPerNode"},
		{"x5", map[string]any{"account": "acme", "running": "yes"}, "spec.running"},
	} {
		_, err := clusters.Create(ctx, obj("Cluster", bad.name, bad.spec), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("Cluster %q %v: %v; want a refusal naming %s", bad.name, bad.spec, err, bad.field)
		}
	}
	good.Object["spec"].(map[string]any)["account"] = "someone-else"
	if _, err := clusters.Update(ctx, good, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.account is immutable") {
		t.Errorf("changing the account: %v", err)
	}
	for _, bad := range []struct {
		spec  map[string]any
		field string
	}{
		{map[string]any{"cluster": "demo", "nodeID": "N_1"}, "spec.nodeID"},
		{map[string]any{"cluster": "demo", "nodeID": strings.Repeat("n", 23)}, "spec.nodeID"},
		{map[string]any{"cluster": "Demo", "nodeID": "n1"}, "spec.cluster"},
	} {
		if _, err := nodes.Create(ctx, obj("Node", "n", bad.spec), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("Node %v: %v; want a refusal naming %s", bad.spec, err, bad.field)
		}
	}

	// Status goes through its subresource only, and is validated too.
	cur, _ := clusters.Get(ctx, "demo", metav1.GetOptions{})
	cur.Object["status"] = map[string]any{"phase": v1alpha1.PhaseReady, "url": "https://127.0.0.1:30000", "nodes": 0}
	if _, err := clusters.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status update: %v", err)
	}
	cur, _ = clusters.Get(ctx, "demo", metav1.GetOptions{})
	cur.Object["status"] = map[string]any{"phase": "Bogus"}
	if _, err := clusters.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "status.phase") {
		t.Errorf("a bad phase: %v; want a refusal naming status.phase", err)
	}
}

// crdFront brings up the tenant cluster name to stand in for the front, as any Kubernetes
// API given by --front-kubeconfig would, and installs the CRDs into it.
func crdFront(ctx context.Context, t *testing.T, p *Provider, name string) *rest.Config {
	t.Helper()
	c := up(t, p, name)
	cfg, err := clientcmd.BuildConfigFromFlags("", c.TenantKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := v1alpha1.InstallCRDs(ctx, apiextensions.NewForConfigOrDie(cfg)); err != nil {
		t.Fatal(err)
	}
	t.Logf("CRDs installed and established in %.2fs", time.Since(t0).Seconds())
	return cfg
}
