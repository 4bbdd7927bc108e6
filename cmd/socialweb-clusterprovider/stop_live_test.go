package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

// Ctrl-C of serve 1, 2, 3 and 4 s after a Cluster is applied, that is during its bring-up:
// serve says "nothing is running" only once it is so (invariant 26): no process of the
// cluster, none of the front, no lease.
func TestCtrlCDuringABringUpLeavesNothing(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	root := livetest.DataRoot(t)
	manifest := filepath.Join(t.TempDir(), "cluster.yaml")
	os.WriteFile(manifest, []byte("apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: cut, namespace: default}\nspec: {account: acme}\n"), 0o600)
	programs := livetest.StackPrograms(bin)
	for _, after := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second} {
		t.Run(fmt.Sprintf("after %s", after), func(t *testing.T) {
			r, kubectl, _ := startServe(t, exe, bin, root, "31700-31749")
			kubectl("apply", "-f", manifest)
			time.Sleep(after) // the moment of the Ctrl-C is what is tested, not a synchronisation
			phase := kubectl("get", "clusters", "cut", "-o", "jsonpath={.status.phase}")
			cluster, _ := processrunner.FindByMarker(filepath.Join(root, "clusters", "cut")+"/", programs)
			t.Logf("Ctrl-C %s after apply: phase %q, %d of its processes running", after, phase, len(cluster))
			r.Cmd.Process.Signal(syscall.SIGINT)
			r.WaitLine(t, "nothing is running")
			// Said only after the check: so it holds right now, with no wait.
			if left, _ := processrunner.FindByMarker(root+"/", programs); len(left) != 0 {
				t.Fatalf("serve said nothing is running, but %d are: %v", len(left), left[0].Cmdline)
			}
			if b, err := os.ReadFile(filepath.Join(root, "leases.json")); err != nil || strings.TrimSpace(string(b)) != "null" && strings.TrimSpace(string(b)) != "[]" {
				t.Fatalf("serve said nothing is running, but the lease book holds %s (%v)", b, err)
			}
			if err := r.Cmd.Wait(); err != nil {
				t.Fatalf("exit after Ctrl-C: %v", err)
			}
		})
	}
}

// A second provider on a held data root is refused at once, naming the holder, and touches
// nothing: the first one's clusters keep every process, same pids.
func TestASecondProviderOnAHeldDataRootIsRefused(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	root := livetest.DataRoot(t)
	r, kubectl, _ := startServe(t, exe, bin, root, "31750-31799")
	manifest := filepath.Join(t.TempDir(), "cluster.yaml")
	os.WriteFile(manifest, []byte("apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: x, namespace: default}\nspec: {account: acme}\n"), 0o600)
	kubectl("apply", "-f", manifest)
	eventually(t, 4*time.Minute, "Cluster x Ready", func() (bool, string) {
		p := kubectl("get", "clusters", "x", "-o", "jsonpath={.status.phase}")
		return p == "Ready", p
	})
	programs := livetest.StackPrograms(bin)
	pids := func() []int {
		ids, _ := processrunner.FindByMarker(root+"/", programs)
		var out []int
		for _, id := range ids {
			out = append(out, id.Pid)
		}
		slices.Sort(out)
		return out
	}
	before := pids()
	for _, args := range [][]string{
		{"up", "x", "--data-root", root, "--bin-dir", bin, "--port-range", "31750-31799"},
		{"serve", "--data-root", root, "--bin-dir", bin, "--port-range", "31750-31799", "--metrics-address", "127.0.0.1:0"},
	} {
		t0 := time.Now()
		out, err := exec.Command(exe, args...).CombinedOutput()
		took := time.Since(t0)
		want := fmt.Sprintf("held by another provider: pid %d", r.Cmd.Process.Pid)
		if err == nil || !strings.Contains(string(out), want) {
			t.Fatalf("%s on a held data root: %v, %s; want a refusal naming %q", args[0], err, out, want)
		}
		t.Logf("%s refused in %.2fs: %s", args[0], took.Seconds(), strings.TrimSpace(string(out)))
	}
	if after := pids(); !slices.Equal(before, after) {
		t.Fatalf("the first provider's processes changed: %v, then %v", before, after)
	}
	if p := kubectl("get", "clusters", "x", "-o", "jsonpath={.status.phase}"); p != "Ready" {
		t.Fatalf("Cluster x after the refusals: %s", p)
	}
	kubectl("delete", "-f", manifest, "--wait=true", "--timeout=180s")
	r.Cmd.Process.Signal(syscall.SIGINT)
	r.WaitLine(t, "stopped; nothing is running")
	r.Cmd.Wait()
}

// Ctrl-C of a serve restarted after a kill -9, before its bring-ups reached the clusters
// the crashed run left: those survivors are reaped too, and their leases released, before
// "nothing is running" is said.
func TestCtrlCRightAfterACrashLeavesNothing(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	root := livetest.DataRoot(t)
	r, kubectl, _ := startServe(t, exe, bin, root, "31550-31599")
	manifest := filepath.Join(t.TempDir(), "clusters.yaml")
	os.WriteFile(manifest, []byte(`apiVersion: socialweb.computer/v1alpha1
kind: Cluster
metadata: {name: a, namespace: default}
spec: {account: acme}
---
apiVersion: socialweb.computer/v1alpha1
kind: Cluster
metadata: {name: b, namespace: default}
spec: {account: acme}
`), 0o600)
	kubectl("apply", "-f", manifest)
	for _, name := range []string{"a", "b"} {
		eventually(t, 4*time.Minute, "Cluster "+name+" Ready", func() (bool, string) {
			p := kubectl("get", "clusters", name, "-o", "jsonpath={.status.phase}")
			return p == "Ready", p
		})
	}
	r.Cmd.Process.Signal(syscall.SIGKILL)
	r.Cmd.Wait()
	programs := livetest.StackPrograms(bin)
	crashed, _ := processrunner.FindByMarker(filepath.Join(root, "clusters")+"/", programs)
	// One bring-up at a time: the second cluster waits for a slot it never gets.
	r = startProvider(t, exe, "serve", "--data-root", root, "--bin-dir", bin, "--port-range", "31550-31599", "--metrics-address", "127.0.0.1:0", "--max-bring-ups", "1")
	r.WaitLine(t, "serving Clusters")
	r.Cmd.Process.Signal(syscall.SIGINT)
	r.WaitLine(t, "nothing is running")
	if err := r.Cmd.Wait(); err != nil {
		t.Fatalf("exit after Ctrl-C: %v", err)
	}
	if left, _ := processrunner.FindByMarker(root+"/", programs); len(left) != 0 {
		t.Fatalf("%d processes of the crashed run, %d left after the Ctrl-C: %v", len(crashed), len(left), left[0].Cmdline)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "leases.json")); strings.Contains(string(b), "holder") {
		t.Fatalf("leases left: %s", b)
	}
	t.Logf("%d processes of the crashed run, none after the Ctrl-C", len(crashed))
}
