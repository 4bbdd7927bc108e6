package clusterprovider

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/internal/cloudprovider/contract"
	"socialweb.computer/kcp/internal/processrunner"
	"socialweb.computer/kcp/internal/procgroup"
)

func runningPods(t *testing.T, c kubernetes.Interface, selector string) map[string]string {
	t.Helper()
	pods, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out[p.Name] = p.Spec.NodeName
		}
	}
	return out
}

// Simulated guests: kwok plays their kubelets, the CCM initializes their Nodes, Pods run on
// them, and removing one reschedules its Pods and deletes its Node.
func TestSimulatedNodesJoinRunPodsAndLeave(t *testing.T) {
	p, ev := liveProvider(t, func(c *Config) { c.PodsPerNode, c.NodeResync = 10, time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := up(t, p, "sim")
	tenant := clientFor(t, c.TenantKubeconfig)

	for _, id := range []string{"n1", "n2", "n3"} {
		t0 := time.Now()
		g, err := c.AddNode(ctx, id)
		if err != nil {
			t.Fatalf("AddNode(%s): %v", id, err)
		}
		t.Logf("node %s Ready and initialized %.2fs after add", g.Name, time.Since(t0).Seconds())
	}
	nodes, err := tenant.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 3 {
		t.Fatalf("nodes: %v, %v; want 3", nodes, err)
	}
	for _, n := range nodes.Items {
		if !NodeReady(&n) || n.Spec.ProviderID != contract.ProviderID("sim", n.Name) || n.Labels[contract.ClusterLabel] != "sim" {
			t.Errorf("node %s: ready=%v providerID=%q labels=%v", n.Name, NodeReady(&n), n.Spec.ProviderID, n.Labels)
		}
		if pods := n.Status.Allocatable[corev1.ResourcePods]; pods.Value() != 10 {
			t.Errorf("node %s allocatable pods %s, want 10", n.Name, pods.String())
		}
	}
	if list, _ := c.Instances(); len(list) != 3 {
		t.Fatalf("nodes.json lists %d guests, want 3", len(list))
	}

	t.Run("kwok runs under its own scoped identity, nothing on argv", func(t *testing.T) {
		assertAccess(t, clientFor(t, c.Spec.Layout().KwokKubeconfig()), "kwok", []access{
			{authzv1.ResourceAttributes{Verb: "patch", Resource: "nodes", Subresource: "status"}, true},
			{authzv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false},
			{authzv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: "default"}, false},
			{authzv1.ResourceAttributes{Verb: "delete", Resource: "nodes"}, false},
		})
		secrets := secretsOf(t, c.Spec.Layout())
		for _, m := range c.NodeGroup().Members() {
			argv, err := processrunner.Cmdline(m.Identity.Pid)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range secrets {
				if strings.Contains(strings.Join(argv, " "), s) {
					t.Fatalf("%s has a secret on argv", m.Step)
				}
			}
		}
	})

	replicas := int32(6)
	labels := map[string]string{"app": "web"}
	_, err = tenant.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "6 Running pods", func() (bool, string) {
		r := runningPods(t, tenant, "app=web")
		return len(r) == 6, fmt.Sprint(r)
	})

	gone := "sim-n1"
	t0 := time.Now()
	if err := c.RemoveNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s drained, its guest deleted, its Node deleted by the CCM in %.2fs", gone, time.Since(t0).Seconds())
	eventually(t, 2*time.Minute, "6 Running pods, none on "+gone, func() (bool, string) {
		r := runningPods(t, tenant, "app=web")
		for _, n := range r {
			if n == gone {
				return false, fmt.Sprint(r)
			}
		}
		return len(r) == 6, fmt.Sprint(r)
	})
	if list, _ := c.Instances(); len(list) != 2 {
		t.Fatalf("nodes.json lists %d guests after the removal, want 2", len(list))
	}

	// Teardown: kwok first, then the group in reverse; nothing survives.
	stopAndCheck(t, p, c, ev, append([]procgroup.Component{procgroup.ComponentKwok}, groupStopOrder...))

	// A restart brings the listed guests' kubelets back.
	c2 := up(t, p, "sim")
	eventually(t, 2*time.Minute, "both remaining nodes Ready after a restart", func() (bool, string) {
		nodes, err := clientFor(t, c2.TenantKubeconfig).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, n := range nodes.Items {
			if NodeReady(&n) {
				ready++
			}
		}
		return ready == 2 && len(nodes.Items) == 2, fmt.Sprintf("%d of %d Ready", ready, len(nodes.Items))
	})
	if _, err := os.Stat(c2.Spec.Layout().KwokConfig()); err != nil {
		t.Fatal(err)
	}
}
