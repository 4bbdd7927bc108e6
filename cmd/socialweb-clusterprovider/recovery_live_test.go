package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/guestnet"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

// Two clusters through the service, one with two Nodes (a simulated guest and a real one):
// a component that dies is noticed and its cluster comes back while the other is
// untouched; then kill -9 of the provider, a restart, and both are adopted as they run,
// Ready throughout with their data and the Nodes, every process of the earlier run the
// same but the real guest's init (reaped, and the guest booted again), no process twice
// (kwok and the guest included), no port twice.
func TestTheServiceRecovers(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl", "kwok", "socialweb-guest", "containerd", "kubelet", "kube-proxy")
	root := livetest.DataRoot(t)
	hostBefore := livetest.GuestNetworks(t)
	r, kubectl, _ := startServe(t, exe, bin, root, "31600-31699")
	phase := func(name string) string { return kubectl("get", "clusters", name, "-o", "jsonpath={.status.phase}") }
	waitPhase := func(name, want string) {
		t.Helper()
		eventually(t, 4*time.Minute, "Cluster "+name+" "+want, func() (bool, string) { p := phase(name); return p == want, p })
	}
	tenant := func(name string) kubernetes.Interface {
		t.Helper()
		raw, err := base64.StdEncoding.DecodeString(kubectl("get", "secret", name+"-kubeconfig", "-o", "jsonpath={.data.kubeconfig}"))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	manifest := filepath.Join(t.TempDir(), "clusters.yaml")
	os.WriteFile(manifest, []byte(`apiVersion: socialweb.computer/v1alpha1
kind: Cluster
metadata: {name: one, namespace: default}
spec: {account: acme}
---
apiVersion: socialweb.computer/v1alpha1
kind: Cluster
metadata: {name: two, namespace: default}
spec: {account: acme}
---
apiVersion: socialweb.computer/v1alpha1
kind: Node
metadata: {name: two-n1, namespace: default}
spec: {cluster: two, nodeID: n1}
---
apiVersion: socialweb.computer/v1alpha1
kind: Node
metadata: {name: two-n2, namespace: default}
spec: {cluster: two, nodeID: n2, guest: real}
`), 0o600)
	kubectl("apply", "-f", manifest)
	waitPhase("one", "Ready")
	waitPhase("two", "Ready")
	nodeReady := func() {
		t.Helper()
		for _, n := range []string{"two-n1 kwok", "two-n2 real"} {
			name, guest, _ := strings.Cut(n, " ")
			eventually(t, 2*time.Minute, "Node "+name+" Ready", func() (bool, string) {
				p := kubectl("get", "nodes.socialweb.computer", name, "-o", "jsonpath={.status.phase} {.status.providerID} {.status.guest}")
				return p == "Ready socialweb://two/"+name+" "+guest, p
			})
		}
	}
	nodeReady()
	ctx := context.Background()
	for _, name := range []string{"one", "two"} {
		_, err := tenant(name).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"cluster": name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	apiserver := filepath.Join(bin, "kube-control-plane")
	pidsOf := func(cluster string) []processrunner.Identity {
		ids, _ := processrunner.FindByMarker(filepath.Join(root, "clusters", cluster)+"/", []string{apiserver})
		return ids
	}

	t.Run("a component that dies is noticed and its cluster comes back", func(t *testing.T) {
		victim, bystander := pidsOf("one"), pidsOf("two")
		if len(victim) != 1 || len(bystander) != 1 {
			t.Fatalf("control planes: one %v, two %v", victim, bystander)
		}
		t0 := time.Now()
		syscall.Kill(victim[0].Pid, syscall.SIGKILL)
		eventually(t, time.Minute, "Cluster one noticed", func() (bool, string) { p := phase("one"); return p == "Unavailable", p })
		t.Logf("noticed in %.2fs", time.Since(t0).Seconds())
		t.Log(kubectl("get", "clusters", "one", "-o", "jsonpath={.status.conditions[0].message}"))
		waitPhase("one", "Ready")
		t.Logf("Ready again %.2fs after the kill", time.Since(t0).Seconds())
		if !bystander[0].Alive() || phase("two") != "Ready" {
			t.Fatal("the other cluster was touched")
		}
	})

	parent := t
	t.Run("kill -9 of the provider, then a restart", func(t *testing.T) {
		programs := []string{filepath.Join(bin, "kwok"), filepath.Join(bin, "socialweb-guest"), filepath.Join(bin, "kine"), apiserver, filepath.Join(bin, "kube-controller-manager"), filepath.Join(bin, "kube-scheduler"), filepath.Join(bin, "socialweb-cloud-controller-manager"), "/usr/lib/postgresql/15/bin/postgres"}
		before, _ := processrunner.FindByMarker(root+"/", programs)
		// Every status the front holds while the provider dies and adopts is watched: a
		// Ready cluster keeps its URL throughout (the adopting run once wrote Ready with
		// none, before it had the group in hand).
		var seen bytes.Buffer
		watch := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", filepath.Join(root, "operator.kubeconfig"),
			"get", "clusters", "--watch", "--output-watch-events", "-o", `jsonpath={.object.metadata.name} {.object.status.phase} url={.object.status.url}{"\n"}`)
		watch.Stdout = &seen
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		stopWatch := func() string {
			watch.Process.Kill()
			watch.Wait()
			return seen.String()
		}
		defer stopWatch()
		r.Cmd.Process.Signal(syscall.SIGKILL)
		r.Cmd.Wait()
		var metricsURL string
		r, _, metricsURL = startServe(parent, exe, bin, root, "31600-31699") // it outlives this subtest
		// Both are adopted as they run: they stay Ready, and every process of their control
		// planes and kwok is the one from before the crash. The real guest's init is not
		// adopted: it is reaped and the guest booted again from its directory.
		eventually(t, 2*time.Minute, "both clusters adopted", func() (bool, string) {
			n := livetest.MetricValue(t, metricsURL, `socialweb_clusters_adopted_total{state="current"}`)
			return n == 2, fmt.Sprint(n)
		})
		waitPhase("one", "Ready")
		waitPhase("two", "Ready")
		statuses := stopWatch()
		for _, line := range strings.Split(strings.TrimSpace(statuses), "\n") {
			if strings.HasSuffix(line, " Ready url=") {
				t.Errorf("a Ready status without a URL while the provider adopted: %q", line)
			}
		}
		t.Logf("statuses watched across the restart:\n%s", statuses)
		nodeReady()
		for _, name := range []string{"two-n1", "two-n2"} {
			n, err := tenant("two").CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || n.Spec.ProviderID != "socialweb://two/"+name {
				t.Errorf("the tenant's Node %s after the crash: %v", name, err)
			}
		}
		guest := filepath.Join(bin, "socialweb-guest")
		for _, id := range before {
			switch alive := id.Alive(); {
			case id.Cmdline[0] == guest && alive:
				t.Errorf("the real guest's init, pid %d, was left running, not reaped", id.Pid)
			case id.Cmdline[0] != guest && !alive:
				t.Errorf("pid %d (%s) was not adopted", id.Pid, id.Cmdline[0])
			}
		}
		after, _ := processrunner.FindByMarker(root+"/", programs)
		if len(after) != len(before) {
			t.Errorf("%d processes before the crash, %d after: want the same, none twice", len(before), len(after))
		}
		ports := map[string]bool{}
		for _, name := range []string{"one", "two"} {
			cm, err := tenant(name).CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
			if err != nil || cm.Data["cluster"] != name {
				t.Errorf("cluster %s's ConfigMap after the crash: %v, %v", name, cm, err)
			}
			url := kubectl("get", "clusters", name, "-o", "jsonpath={.status.url}")
			if ports[url] {
				t.Errorf("two clusters at %s", url)
			}
			ports[url] = true
		}
		t.Logf("processes before and after: %d, %d; URLs %v", len(before), len(after), ports)
	})

	kubectl("delete", "-f", manifest, "--wait=true", "--timeout=180s")
	r.Cmd.Process.Signal(syscall.SIGINT)
	r.WaitLine(t, "stopped; nothing is running")
	r.Cmd.Wait()
	if left, _ := processrunner.FindByMarker(root+"/", []string{apiserver, filepath.Join(bin, "kine"), filepath.Join(bin, "socialweb-guest")}); len(left) != 0 {
		t.Fatalf("left running: %v", left)
	}
	if left, _ := guestnet.LeftoversSince(ctx, hostBefore); len(left) != 0 {
		t.Fatalf("guest networks left: %v", left)
	}
}
