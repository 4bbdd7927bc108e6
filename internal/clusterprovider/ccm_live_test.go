package clusterprovider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/internal/cloudprovider/contract"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/instancesnapshot"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/nodeprovider"
	"socialweb.computer/kcp/internal/procgroup"
)

func eventually(t *testing.T, within time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	livetest.Eventually(t, within, what, check)
}

// guest is the snapshot record of node id in cluster, named by the one derivation.
func guest(t *testing.T, cluster, id string) instancesnapshot.Instance {
	t.Helper()
	name, err := nodeprovider.NodeName(cluster, id)
	if err != nil {
		t.Fatal(err)
	}
	return instancesnapshot.Instance{Cluster: cluster, Name: name, NodeID: id, State: instancesnapshot.StateRunning,
		Addresses: []instancesnapshot.Address{{Type: "InternalIP", Address: "10.200.0.1"}, {Type: "Hostname", Address: name}}}
}

// joinAsKubelet registers a Node the way a kubelet with --cloud-provider=external does:
// under its own identity system:node:<name> in system:nodes (so the Node authorizer and
// NodeRestriction bound it), with the uninitialized taint.
func joinAsKubelet(t *testing.T, c *Cluster, name string) {
	t.Helper()
	kubelet, err := nodeClient(c.Spec, name)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubelet.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: nodeprovider.UninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node %s registers as system:node:%s: %v", name, name, err)
	}
}

// initialized reports whether the CCM has initialized node, and what it looks like.
func initialized(n *corev1.Node, cluster string) (bool, string) {
	tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == nodeprovider.UninitializedTaint })
	seen := fmt.Sprintf("providerID=%q label=%q tainted=%v", n.Spec.ProviderID, n.Labels[contract.ClusterLabel], tainted)
	return !tainted && n.Spec.ProviderID == contract.ProviderID(cluster, n.Name) && n.Labels[contract.ClusterLabel] == cluster, seen
}

func getNode(c kubernetes.Interface, name string) (*corev1.Node, error) {
	return c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
}

// The seed's four-step proof with the CCM in the group, and what the CCM must do and must
// never do in between.
func TestTheFourStepProofWithTheCCM(t *testing.T) {
	p, ev := liveProvider(t, func(c *Config) { c.MaxNodes, c.PodsPerNode, c.NodeResync = 2, 16, time.Second })
	ctx := context.Background()
	const cluster = "ccm"

	// (1) Ready at zero nodes, the CCM the last component of its group.
	t0 := time.Now()
	c := up(t, p, cluster)
	t.Logf("step 1: cluster Ready at zero nodes in %.2fs", time.Since(t0).Seconds())
	if got := ev.phase("ready"); len(got) == 0 || got[len(got)-1] != procgroup.ComponentCloudControllerManager {
		t.Fatalf("gates passed %v: the CCM must be the last", got)
	}
	tenant := clientFor(t, c.TenantKubeconfig)
	if nodes, err := tenant.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(nodes.Items) != 0 {
		t.Fatalf("nodes at step 1: %v, %v", nodes, err)
	}
	members := c.Group().Members()
	ccm := members[len(members)-1]
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", ccm.Identity.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if len(ccm.Identity.Cmdline) != 1 {
		t.Fatalf("the CCM's argv is %v, want the binary alone", ccm.Identity.Cmdline)
	}
	for _, s := range secretsOf(t, c.Spec.Layout()) {
		if bytes.Contains(environ, []byte(s)) {
			t.Fatal("a secret is in the CCM's environment: it should carry only file paths")
		}
	}

	// (2) A node joins: its guest is listed first (invariant 10), then it registers.
	g1 := guest(t, cluster, "n1")
	t0 = time.Now()
	if err := c.PutInstance(g1); err != nil {
		t.Fatal(err)
	}
	joinAsKubelet(t, c, g1.Name)
	t.Logf("step 2: node %s registered as system:node:%s in %.2fs", g1.Name, g1.Name, time.Since(t0).Seconds())

	// (3) The CCM initializes it: provider ID, cluster label, taint gone.
	eventually(t, time.Minute, "node "+g1.Name+" initialized by the CCM", func() (bool, string) {
		n, err := getNode(tenant, g1.Name)
		if err != nil {
			return false, err.Error()
		}
		return initialized(n, cluster)
	})
	t.Logf("step 3: node %s initialized %.2fs after it registered", g1.Name, time.Since(t0).Seconds())
	out, err := exec.Command(filepath.Join(binDir(t), "kubectl"), "--kubeconfig", c.TenantKubeconfig, "get", "node", g1.Name, "-o", "jsonpath={.spec.providerID}").CombinedOutput()
	if err != nil || string(out) != "socialweb://ccm/"+g1.Name {
		t.Fatalf("kubectl get node %s -o jsonpath={.spec.providerID} = %q, %v", g1.Name, out, err)
	}
	n1, _ := getNode(tenant, g1.Name)
	if n1.Labels[contract.PodsPerNodeLabel] != "16" {
		t.Errorf("pods-per-node label %q, want 16", n1.Labels[contract.PodsPerNodeLabel])
	}
	// The CCM updates the Node (taint off) first and patches its status addresses after
	// (k8s.io/cloud-provider's syncNode), so the address may trail "initialized": wait.
	eventually(t, time.Minute, "node "+g1.Name+" has the snapshot's InternalIP", func() (bool, string) {
		n, err := getNode(tenant, g1.Name)
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.200.0.1"}), fmt.Sprintf("addresses %v", n.Status.Addresses)
	})

	t.Run("its credential patches Nodes and reads no Secret", func(t *testing.T) {
		assertAccess(t, clientFor(t, c.Spec.Layout().CloudControllerManagerKubeconfig()), "the CCM", []access{
			{authzv1.ResourceAttributes{Verb: "patch", Resource: "nodes"}, true},
			{authzv1.ResourceAttributes{Verb: "patch", Resource: "nodes", Subresource: "status"}, true},
			{authzv1.ResourceAttributes{Verb: "delete", Resource: "nodes"}, true},
			{authzv1.ResourceAttributes{Verb: "create", Resource: "events", Namespace: "default"}, true},
			{authzv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false},
			{authzv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "kube-system"}, false},
			{authzv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: "default"}, false},
			{authzv1.ResourceAttributes{Verb: "create", Resource: "nodes"}, false},
		})
	})

	g2, g3 := guest(t, cluster, "n2"), guest(t, cluster, "n3")
	var admitted, refused string
	t.Run("the quota keeps a third node uninitialized, with an Event", func(t *testing.T) {
		for _, g := range []instancesnapshot.Instance{g2, g3} {
			if err := c.PutInstance(g); err != nil {
				t.Fatal(err)
			}
			joinAsKubelet(t, c, g.Name)
		}
		eventually(t, time.Minute, "one of n2, n3 initialized and the other refused with an Event", func() (bool, string) {
			evs, err := tenant.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=NodeQuotaExceeded"})
			if err != nil || len(evs.Items) == 0 {
				return false, fmt.Sprintf("no NodeQuotaExceeded event (%v)", err)
			}
			refused = evs.Items[0].InvolvedObject.Name
			admitted = g2.Name
			if refused == g2.Name {
				admitted = g3.Name
			}
			n, err := getNode(tenant, admitted)
			if err != nil {
				return false, err.Error()
			}
			ok, seen := initialized(n, cluster)
			return ok, admitted + ": " + seen + "; event: " + evs.Items[0].Message
		})
		n, _ := getNode(tenant, refused)
		if ok, seen := initialized(n, cluster); ok || n.Spec.ProviderID != "" {
			t.Fatalf("%s is over the quota of 2 and yet initialized: %s", refused, seen)
		}
	})
	if admitted == "" {
		t.FailNow()
	}

	t.Run("a corrupt snapshot deletes nothing and is logged", func(t *testing.T) {
		log := c.Spec.Layout().Log(procgroup.ComponentCloudControllerManager.String())
		count := func() int {
			b, _ := os.ReadFile(log)
			return bytes.Count(b, []byte("error checking if node"))
		}
		before := count()
		good, _ := os.ReadFile(c.Spec.Layout().NodesFile())
		if err := os.WriteFile(c.Spec.Layout().NodesFile(), []byte(`[{"cluster":"ccm","name":`), 0o600); err != nil {
			t.Fatal(err)
		}
		// Two monitor passes over all three NotReady Nodes, each refused with the error.
		eventually(t, 30*time.Second, "the CCM logs the unreadable snapshot", func() (bool, string) {
			return count() >= before+6, fmt.Sprintf("%d new error lines", count()-before)
		})
		b, _ := os.ReadFile(log)
		if !bytes.Contains(b, []byte("instance snapshot "+c.Spec.Layout().NodesFile())) {
			t.Error("the CCM's error does not name the snapshot file")
		}
		for _, name := range []string{g1.Name, g2.Name, g3.Name} {
			if _, err := getNode(tenant, name); err != nil {
				t.Errorf("node %s after a corrupt snapshot: %v", name, err)
			}
		}
		// The operator's repair: the guests as they are, written atomically.
		if err := instancesnapshot.Write(c.Spec.Layout().NodesFile(), cluster, mustParse(t, good)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("removing a guest deletes its NotReady Node, and only it", func(t *testing.T) {
		t0 := time.Now()
		if err := c.RemoveInstance(admitted); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "node "+admitted+" deleted", func() (bool, string) {
			_, err := getNode(tenant, admitted)
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		t.Logf("node %s deleted %.2fs after its guest left nodes.json", admitted, time.Since(t0).Seconds())
		for _, name := range []string{g1.Name, refused} {
			if _, err := getNode(tenant, name); err != nil {
				t.Errorf("node %s, still listed, was touched: %v", name, err)
			}
		}
	})

	t.Run("it refuses an admin kubeconfig by identity", func(t *testing.T) {
		l := c.Spec.Layout()
		dir := t.TempDir()
		for _, k := range []struct{ from, want string }{
			{l.AdminKubeconfig(), "system:masters"},
			{l.TenantKubeconfig(), "allowed * on *"},
		} {
			renamed := filepath.Join(dir, "innocent.kubeconfig")
			b, _ := os.ReadFile(k.from)
			os.WriteFile(renamed, b, 0o600)
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			cmd := exec.CommandContext(ctx, filepath.Join(binDir(t), clusterstack.CloudControllerManagerBinary))
			cmd.Env = []string{
				contract.EnvTenantKubeconfig + "=" + renamed, contract.EnvCluster + "=" + cluster,
				contract.EnvInstancesFile + "=" + l.NodesFile(),
			}
			out, err := cmd.CombinedOutput()
			cancel()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || !strings.Contains(string(out), k.want) || !strings.Contains(string(out), "refusing an admin credential") {
				t.Errorf("CCM with %s renamed: %v\n%s\nwant a non-zero exit naming %q", filepath.Base(k.from), err, out, k.want)
			}
			if strings.Contains(string(out), contract.ReadyLine(cluster)) {
				t.Errorf("the CCM with %s got as far as ready", filepath.Base(k.from))
			}
		}
	})

	// (4) Teardown in reverse; nothing survives.
	t.Logf("step 4: teardown in %.2fs", stopAndCheck(t, p, c, ev, groupStopOrder).Seconds())
}

func mustParse(t *testing.T, b []byte) []instancesnapshot.Instance {
	t.Helper()
	list, err := instancesnapshot.Parse(b, "ccm")
	if err != nil {
		t.Fatal(err)
	}
	return list
}
