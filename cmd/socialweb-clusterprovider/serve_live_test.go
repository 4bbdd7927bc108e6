package main

import (
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

// The service as an operator runs it: serve with its embedded front, then plain kubectl:
// apply a Cluster, see it Ready, reach it with the delivered kubeconfig, delete it, and
// Ctrl-C leaves nothing, the front included.
func TestServeWithItsOwnFront(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	root := livetest.DataRoot(t)
	r, kubectl, metricsURL := startServe(t, exe, bin, root, "31500-31599")
	manifest := filepath.Join(t.TempDir(), "cluster.yaml")
	os.WriteFile(manifest, []byte("apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: web, namespace: default}\nspec: {account: acme}\n"), 0o600)
	t0 := time.Now()
	kubectl("apply", "-f", manifest)
	eventually(t, 3*time.Minute, "Cluster web Ready", func() (bool, string) {
		out := kubectl("get", "clusters", "web", "-o", "jsonpath={.status.phase}")
		return out == "Ready", out
	})
	t.Logf("kubectl apply to Ready in %.2fs", time.Since(t0).Seconds())
	// kubectl describe shows the provider's Events on the Cluster, the bring-up then Ready.
	eventually(t, time.Minute, "Events BringingUp and Ready on Cluster web", func() (bool, string) {
		out := kubectl("describe", "cluster", "web")
		_, ev, _ := strings.Cut(out, "\nEvents:")
		i, j := regexp.MustCompile(`Normal\s+BringingUp`).FindStringIndex(ev), regexp.MustCompile(`Normal\s+Ready`).FindStringIndex(ev)
		return i != nil && j != nil && j[0] > i[0] && strings.Contains(ev, "socialweb-clusterprovider"), out
	})
	t.Log(kubectl("get", "clusters"))
	res, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`socialweb_clusters{phase="Ready"} 1`, "socialweb_cluster_bringup_seconds_count 1", `socialweb_cluster_nodes{cluster="default/web"} 0`,
		`socialweb_cluster_phase{cluster="default/web",phase="Ready"} 1`, "go_goroutines ", "process_resident_memory_bytes "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		u := strings.TrimSuffix(metricsURL, "/metrics") + path
		res, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("%s: %s; want 200 while the loop serves", u, res.Status)
		}
	}
	kc := filepath.Join(t.TempDir(), "web.kubeconfig")
	b := kubectl("get", "secret", "web-kubeconfig", "-o", "jsonpath={.data.kubeconfig}")
	raw, err := base64.StdEncoding.DecodeString(b)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(kc, raw, 0o600)
	out, err := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kc, "get", "ns", "kube-system", "-o", "name").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "namespace/kube-system" {
		t.Fatalf("the delivered kubeconfig: %q, %v", out, err)
	}
	kubectl("delete", "-f", manifest, "--wait=true", "--timeout=120s")
	if _, err := os.Stat(filepath.Join(root, "clusters", "web")); !os.IsNotExist(err) {
		t.Error("the Cluster's DataDir survived its deletion")
	}

	r.Cmd.Process.Signal(syscall.SIGINT)
	r.WaitLine(t, "stopped; nothing is running")
	if err := r.Cmd.Wait(); err != nil {
		t.Fatalf("exit after Ctrl-C: %v", err)
	}
	programs := []string{filepath.Join(bin, "kine"), filepath.Join(bin, "kube-control-plane"), filepath.Join(bin, "kube-apiserver"), filepath.Join(bin, "kube-controller-manager"), filepath.Join(bin, "socialweb-cloud-controller-manager")}
	if left, _ := processrunner.FindByMarker(root+"/", programs); len(left) != 0 {
		t.Fatalf("left running after Ctrl-C: %v", left)
	}
}
