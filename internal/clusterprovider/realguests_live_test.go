package clusterprovider

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/guestimage"
	"socialweb.computer/kcp/internal/guestnet"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/nodeprovider"
)

// realProvider is a live provider with control groups, which real guests need, and the
// guest binaries installed.
func realProvider(t *testing.T) *Provider {
	t.Helper()
	var h *cgroups.Hierarchy
	p, _ := liveProvider(t, func(c *Config) {
		var err error
		if h, err = cgroups.Detect(cgroups.Mount, CgroupSubtree(c.DataRoot)); err != nil {
			livetest.Need(t, err.Error())
		}
		c.Cgroups = h
	})
	for _, b := range GuestBinaries {
		if _, err := os.Stat(filepath.Join(p.cfg.BinDir, b)); err != nil {
			livetest.Need(t, b+" is not installed; run "+InstallHint)
		}
	}
	for _, b := range []string{"/usr/sbin/runc", "/usr/lib/cni/bridge", "/usr/sbin/iptables", guestimage.BusyboxBinary} {
		if _, err := os.Stat(b); err != nil {
			livetest.Need(t, b+" is not installed; run "+InstallHint)
		}
	}
	t.Cleanup(func() { h.Group().RemoveEverywhere() })
	return p
}

// kubectl runs the project's kubectl against c as its tenant.
func kubectl(t *testing.T, c *Cluster, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "kubectl"), append([]string{"--kubeconfig", c.TenantKubeconfig}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Two real guests join one cluster from their user data alone; each Node is Ready and
// initialized by our CCM with the guest's InternalIP; a pod prints hello and kubectl logs
// and exec reach it through the kubelet; removing a guest leaves nothing of it.
func TestRealGuestsJoinAndRunPods(t *testing.T) {
	p := realProvider(t)
	c := up(t, p, "real")
	t.Cleanup(func() { dumpGuestLogs(t, c) })
	admin := clientFor(t, c.TenantKubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	t0 := time.Now()
	g1, err := c.AddNodeOf(ctx, "n1", nodeprovider.KindReal)
	if err != nil {
		t.Fatalf("add real guest n1: %v", err)
	}
	t.Logf("real guest %s Ready and initialized in %.2fs", g1.Name, time.Since(t0).Seconds())
	n, err := admin.CoreV1().Nodes().Get(ctx, g1.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var internal string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = a.Address
		}
	}
	if internal == "" || n.Labels[nodeprovider.GuestLabel] != nodeprovider.KindReal || !strings.HasPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://2.") {
		t.Errorf("node %s: InternalIP %q, guest label %q, runtime %q", n.Name, internal, n.Labels[nodeprovider.GuestLabel], n.Status.NodeInfo.ContainerRuntimeVersion)
	}

	if out, err := kubectl(t, c, "run", "hello", "--image="+guestimage.BusyboxImage, "--restart=Never", "--", "echo", "hello"); err != nil {
		t.Fatalf("kubectl run: %v: %s", err, out)
	}
	if out, err := kubectl(t, c, "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/hello", "--timeout=120s"); err != nil {
		t.Fatalf("pod hello: %v: %s", err, out)
	}
	if out, err := kubectl(t, c, "logs", "hello"); err != nil || out != "hello" {
		t.Fatalf("kubectl logs hello = %q, %v; want hello", out, err)
	}

	if err := c.RemoveNode(ctx, "n1"); err != nil {
		t.Fatalf("remove n1: %v", err)
	}
	left, err := guestnet.Leftovers(ctx)
	if err != nil || len(left) > 0 {
		t.Errorf("after the last real guest went: %v %v", left, err)
	}
}

// dumpGuestLogs shows the end of every log of c's real guests when the test failed.
func dumpGuestLogs(t *testing.T, c *Cluster) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(c.DataDir, "guests", "*", "log", "*.log"))
	logs = append(logs, c.Spec.Layout().Log("guest"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("--- %s (last %d lines)\n%s", f, min(40, len(lines)), strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}
