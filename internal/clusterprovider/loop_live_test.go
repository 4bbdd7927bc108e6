package clusterprovider

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/cloudprovider/contract"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/localname"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/processrunner"
)

// Through a front: a Cluster applied there comes up Ready with its URL in status and its
// kubeconfig delivered as a Secret; deleting it tears everything down, the finalizer last.
func TestFrontClusterLifecycle(t *testing.T) {
	fp, _ := liveProvider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := crdFront(ctx, t, fp, "frontapi")
	dyn := dynamic.NewForConfigOrDie(cfg)
	core := kubernetes.NewForConfigOrDie(cfg)

	// The provider of tenant clusters, with its own data root and ports.
	p, err := New(Config{DataRoot: livetest.DataRoot(t), BinDir: binDir(t), Ports: portallocator.Range{First: 31200, Last: 31299}, Grace: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	loopCtx, stopLoop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- (&Loop{P: p, Front: dyn, Core: core, Instance: "test", Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}).Run(loopCtx)
	}()
	defer func() { stopLoop(); <-done }()

	clusters := dyn.Resource(ClustersResource).Namespace("default")
	t0 := time.Now()
	_, err = clusters.Create(ctx, v1alpha1.Object("Cluster", "acme", map[string]any{"account": "acme", "maxNodes": 3, "podsPerNode": 20}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var url string
	eventually(t, 3*time.Minute, "Cluster acme Ready", func() (bool, string) {
		u, err := clusters.Get(ctx, "acme", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		url, _, _ = unstructured.NestedString(u.Object, "status", "url")
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		return phase == v1alpha1.PhaseReady && url != "", fmt.Sprintf("phase %q url %q conditions %v", phase, url, conds)
	})
	t.Logf("step 1: Cluster applied to Ready in %.2fs at %s", time.Since(t0).Seconds(), url)
	// The Cluster's own node policy reaches its CCM.
	ccms, _ := processrunner.FindByMarker(p.DataDir("acme")+"/", []string{filepath.Join(binDir(t), "socialweb-cloud-controller-manager")})
	if len(ccms) != 1 {
		t.Fatalf("CCMs of acme: %v", ccms)
	}
	environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", ccms[0].Pid))
	for _, kv := range []string{"SOCIALWEB_CLOUDCONTROLLERMANAGER_MAX_NODES=3", "SOCIALWEB_CLOUDCONTROLLERMANAGER_PODS_PER_NODE=20"} {
		if !strings.Contains(string(environ), kv) {
			t.Errorf("the CCM's environment lacks %s", kv)
		}
	}

	// The same name in another namespace (another account) is a cluster of its own, under
	// its own local name; its deletion touches nothing of the first.
	if _, err := core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	twin := dyn.Resource(ClustersResource).Namespace("other")
	if _, err := twin.Create(ctx, v1alpha1.Object("Cluster", "acme", map[string]any{"account": "rival"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	twinLocal := localname.Hashed("other", "acme", 0)
	eventually(t, 3*time.Minute, "other/acme Ready as "+twinLocal, func() (bool, string) {
		u, err := twin.Get(ctx, "acme", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		local := u.GetAnnotations()[v1alpha1.LocalNameAnnotation]
		return phase == v1alpha1.PhaseReady && local == twinLocal, fmt.Sprintf("phase %q local name %q", phase, local)
	})
	twinSec, err := core.CoreV1().Secrets("other").Get(ctx, "acme-kubeconfig", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	twinCfg, err := clientcmd.RESTConfigFromKubeConfig(twinSec.Data["kubeconfig"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(twinCfg).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rival"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the twin's kubeconfig does not reach the twin: %v", err)
	}
	if err := twin.Delete(ctx, "acme", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "other/acme gone", func() (bool, string) {
		_, err := twin.Get(ctx, "acme", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if _, err := os.Stat(p.DataDir(twinLocal)); !os.IsNotExist(err) {
		t.Errorf("the twin's DataDir after its deletion: %v", err)
	}
	if u, _ := clusters.Get(ctx, "acme", metav1.GetOptions{}); u == nil || fmt.Sprint(u.Object["status"].(map[string]any)["phase"]) != "Ready" {
		t.Fatal("deleting the twin touched the first acme")
	}

	sec, err := core.CoreV1().Secrets("default").Get(ctx, "acme-kubeconfig", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tcfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["kubeconfig"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(tcfg).CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("the delivered kubeconfig does not reach the tenant: %v", err)
	}
	if _, err := kubernetes.NewForConfigOrDie(tcfg).CoreV1().ConfigMaps("default").Get(ctx, "rival", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the twin's ConfigMap, read in the first acme: %v; want NotFound", err)
	}

	// Step 2 and 3 through the front: a Node object becomes a guest whose Node the CCM
	// initializes; deleting one removes its guest and the tenant's Node.
	nodes := dyn.Resource(NodesResource).Namespace("default")
	nodeObj := func(name, id string) *unstructured.Unstructured {
		return v1alpha1.Object("Node", name, map[string]any{"cluster": "acme", "nodeID": id})
	}
	if _, err := nodes.Create(ctx, nodeObj("n9", "n9"), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "metadata.name: want acme-n9") {
		t.Errorf("a Node named other than <cluster>-<nodeID>: %v; want a refusal naming metadata.name", err)
	}
	tenant := kubernetes.NewForConfigOrDie(tcfg)
	t0 = time.Now()
	for _, id := range []string{"n1", "n2"} {
		if _, err := nodes.Create(ctx, nodeObj("acme-"+id, id), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"n1", "n2"} {
		eventually(t, 2*time.Minute, "Node acme-"+id+" Ready", func() (bool, string) {
			u, err := nodes.Get(ctx, "acme-"+id, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			st, _, _ := unstructured.NestedStringMap(u.Object, "status")
			return st["phase"] == "Ready" && st["providerID"] == contract.ProviderID("acme", "acme-"+id), fmt.Sprint(st)
		})
	}
	t.Logf("steps 2-3: two Node objects to Ready in %.2fs", time.Since(t0).Seconds())
	n1, err := tenant.CoreV1().Nodes().Get(ctx, "acme-n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n1.Spec.ProviderID != contract.ProviderID("acme", "acme-n1") || n1.Labels[contract.ClusterLabel] != "acme" || !NodeReady(n1) {
		t.Errorf("tenant Node acme-n1: providerID %q labels %v taints %v", n1.Spec.ProviderID, n1.Labels, n1.Spec.Taints)
	}
	// The Cluster's maxNodes is 3: a fourth Node object waits, saying why, holding no
	// worker, and can be deleted while it waits.
	nodePhase := func(name string) map[string]string {
		u, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return map[string]string{"err": err.Error()}
		}
		st, _, _ := unstructured.NestedStringMap(u.Object, "status")
		return st
	}
	for _, id := range []string{"n3", "n4"} {
		if _, err := nodes.Create(ctx, nodeObj("acme-"+id, id), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if id == "n3" {
			eventually(t, time.Minute, "Node acme-n3 Ready", func() (bool, string) { st := nodePhase("acme-n3"); return st["phase"] == "Ready", fmt.Sprint(st) })
		}
	}
	eventually(t, time.Minute, "Node acme-n4 held by the quota", func() (bool, string) {
		st := nodePhase("acme-n4")
		return st["phase"] == "Joining" && strings.Contains(st["message"], "more nodes than its maxNodes"), fmt.Sprint(st)
	})
	if err := nodes.Delete(ctx, "acme-n4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "Node acme-n4 gone", func() (bool, string) {
		_, err := nodes.Get(ctx, "acme-n4", metav1.GetOptions{})
		_, terr := tenant.CoreV1().Nodes().Get(ctx, "acme-n4", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(terr), fmt.Sprint(err, terr)
	})
	eventually(t, time.Minute, "status.nodes 3", func() (bool, string) {
		u, _ := clusters.Get(ctx, "acme", metav1.GetOptions{})
		n, _, _ := unstructured.NestedInt64(u.Object, "status", "nodes")
		return n == 3, fmt.Sprint(n)
	})
	t0 = time.Now()
	if err := nodes.Delete(ctx, "acme-n2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "Node acme-n2 and its tenant Node gone", func() (bool, string) {
		_, err := nodes.Get(ctx, "acme-n2", metav1.GetOptions{})
		_, terr := tenant.CoreV1().Nodes().Get(ctx, "acme-n2", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(terr), fmt.Sprint(err, terr)
	})
	t.Logf("a Node object deleted to its tenant Node gone in %.2fs", time.Since(t0).Seconds())
	if _, err := tenant.CoreV1().Nodes().Get(ctx, "acme-n1", metav1.GetOptions{}); err != nil {
		t.Errorf("removing n2 touched n1: %v", err)
	}

	// Deleting the Cluster takes its remaining Node object with it (garbage collection).
	t0 = time.Now()
	if err := clusters.Delete(ctx, "acme", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "Cluster acme gone", func() (bool, string) {
		_, err := clusters.Get(ctx, "acme", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	t.Logf("step 4: Cluster deleted to gone in %.2fs", time.Since(t0).Seconds())
	eventually(t, time.Minute, "Node acme-n1 collected with its Cluster", func() (bool, string) {
		_, err := nodes.Get(ctx, "acme-n1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if _, err := os.Stat(p.DataDir("acme")); !os.IsNotExist(err) {
		t.Error("the DataDir survived the deletion")
	}
	if ls := p.Leases().Leases(); len(ls) != 0 {
		t.Errorf("leases left: %v", ls)
	}
	if _, err := core.CoreV1().Secrets("default").Get(ctx, "acme-kubeconfig", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the kubeconfig Secret survived: %v", err)
	}
	if ids, _ := processrunnerFind(p, "acme"); len(ids) != 0 {
		t.Errorf("processes survived: %v", ids)
	}
}

func processrunnerFind(p *Provider, name string) ([]string, error) {
	ids, err := processrunner.FindByMarker(p.DataDir(name)+"/", p.RequiredBinaries())
	var out []string
	for _, id := range ids {
		out = append(out, fmt.Sprint(id.Pid, id.Cmdline))
	}
	return out, err
}
