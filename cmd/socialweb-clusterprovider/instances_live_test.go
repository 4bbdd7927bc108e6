package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

// Two instances on one front, as two hosts would run them: host-a (its own front,
// capacity 4) and host-b (the same front, capacity 6), each with its own data root and
// ports. Of 11 Clusters, 4 are bound to host-a and 6 to host-b, each running exactly once,
// on its instance's host; the 11th waits, Pending, condition NoRoom. A Cluster placed on an
// instance that does not exist waits with InstanceUnknown. Once a cluster of host-a is
// deleted, the waiting one is placed there. A third serve that claims host-b's name is
// refused, and changes nothing. A Cluster whose binding is gone (as one from before
// instances) is bound again where its data is, and runs on untouched.
func TestTwoInstancesShareOneFront(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	rootA, rootB := livetest.DataRoot(t), livetest.DataRoot(t)
	_, kubectl, _ := startServeWith(t, exe, bin, rootA, "31900-31949", "--instance", "host-a", "--capacity", "clusters=4")
	front := filepath.Join(rootA, "operator.kubeconfig")
	livetest.Serve(t, exe, bin, rootB, "31950-31979", "--front-kubeconfig", front, "--instance", "host-b", "--capacity", "clusters=6")

	var manifest strings.Builder
	names := []string{}
	for i := 1; i <= 11; i++ {
		name := fmt.Sprintf("c%02d", i)
		names = append(names, name)
		fmt.Fprintf(&manifest, "apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: %s, namespace: default}\nspec: {account: acme}\n---\n", name)
	}
	manifest.WriteString("apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: nowhere, namespace: default}\nspec: {account: acme, placement: {instance: host-z}}\n")
	file := filepath.Join(t.TempDir(), "clusters.yaml")
	os.WriteFile(file, []byte(manifest.String()), 0o600)
	t0 := time.Now()
	kubectl("apply", "-f", file)

	state := func(name string) (phase, reason, instance, label string) {
		out := kubectl("get", "clusters", name, "-o", `jsonpath={.status.phase} {.status.conditions[?(@.type=="Ready")].reason} {.status.instance} {.metadata.labels.socialweb\.computer/instance}`)
		f := strings.Fields(out + " - - - -")
		return f[0], f[1], f[2], f[3]
	}
	apiserver := filepath.Join(bin, "kube-control-plane")
	apiservers := func(root, name string) int {
		ids, _ := processrunner.FindByMarker(filepath.Join(root, "clusters", name)+"/", []string{apiserver})
		return len(ids)
	}
	var (
		waiting string
		ready   int
		on      map[string]int
	)
	eventually(t, 8*time.Minute, "10 Clusters Ready, 4 on host-a and 6 on host-b, and one NoRoom", func() (bool, string) {
		ready, on, waiting = 0, map[string]int{}, ""
		var seen []string
		for _, n := range names {
			phase, reason, instance, label := state(n)
			seen = append(seen, n+" "+phase+" "+reason+" "+label)
			switch {
			case phase == "Ready" && instance == label:
				ready++
				on[label]++
			case phase == "Pending" && reason == "NoRoom" && label == "-":
				waiting = n
			}
		}
		return ready == 10 && on["host-a"] == 4 && on["host-b"] == 6 && waiting != "", strings.Join(seen, "; ")
	})
	t.Logf("10 clusters Ready across two instances %.1fs after they were declared", time.Since(t0).Seconds())
	for _, n := range names {
		_, _, instance, _ := state(n)
		a, b := apiservers(rootA, n), apiservers(rootB, n)
		want := map[string][2]int{"host-a": {1, 0}, "host-b": {0, 1}, "-": {0, 0}}[instance]
		if a != want[0] || b != want[1] {
			t.Errorf("cluster %s (instance %s): %d apiservers under host-a's root, %d under host-b's; want %v", n, instance, a, b, want)
		}
		if _, err := os.Stat(filepath.Join(map[string]string{"host-a": rootB, "host-b": rootA, "-": rootA}[instance], "clusters", n)); err == nil {
			t.Errorf("cluster %s (instance %s) has a DataDir on the other host too", n, instance)
		}
	}
	msg := kubectl("get", "clusters", waiting, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].message}`)
	if !strings.Contains(msg, "no instance has room") {
		t.Errorf("the waiting cluster's condition: %q, want it to say no instance has room", msg)
	}
	if phase, reason, _, _ := state("nowhere"); phase != "Pending" || reason != "InstanceUnknown" {
		t.Errorf("a Cluster placed on instance host-z, which does not exist: %s %s; want Pending InstanceUnknown", phase, reason)
	}

	// A third serve that claims host-b's name, from another data root: refused at its
	// start, with what to do, and host-b's Lease is untouched.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "serve", "--data-root", livetest.DataRoot(t), "--bin-dir", bin, "--port-range", "31980-31989",
		"--metrics-address", "127.0.0.1:0", "--front-kubeconfig", front, "--instance", "host-b").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another serve holds this instance name") || !strings.Contains(string(out), "choose another name") {
		t.Errorf("a second serve named host-b: %v\n%s", err, out)
	}
	if where := kubectl("get", "leases", "-n", "socialweb-system", "host-b", "-o", `jsonpath={.metadata.annotations.socialweb\.computer/where}`); !strings.HasSuffix(where, ":"+rootB) {
		t.Errorf("host-b's Lease after the refused claim is held from %q, want host-b's root %s", where, rootB)
	}

	// A Cluster from before instances has no binding: it is bound to the instance its data
	// is on, room or not, and runs on untouched.
	var onB string
	for _, n := range names {
		if _, _, instance, _ := state(n); instance == "host-b" {
			onB = n
			break
		}
	}
	before, _ := processrunner.FindByMarker(filepath.Join(rootB, "clusters", onB)+"/", []string{apiserver})
	kubectl("label", "clusters", onB, "socialweb.computer/instance-")
	eventually(t, time.Minute, onB+" bound again to host-b, where its data is", func() (bool, string) {
		phase, reason, instance, label := state(onB)
		return phase == "Ready" && label == "host-b", phase + " " + reason + " " + instance + " " + label
	})
	if after, _ := processrunner.FindByMarker(filepath.Join(rootB, "clusters", onB)+"/", []string{apiserver}); len(before) != 1 || len(after) != 1 || after[0].Pid != before[0].Pid {
		t.Errorf("%s's apiserver before the label went %v, after %v: want it untouched", onB, before, after)
	}

	// Room on host-a: the waiting cluster goes there.
	var onA string
	for _, n := range names {
		if _, _, instance, _ := state(n); instance == "host-a" {
			onA = n
			break
		}
	}
	kubectl("delete", "clusters", onA, "--wait=true", "--timeout=180s")
	eventually(t, 4*time.Minute, waiting+" Ready on host-a once "+onA+" is gone", func() (bool, string) {
		phase, reason, instance, label := state(waiting)
		return phase == "Ready" && instance == "host-a" && label == "host-a", phase + " " + reason + " " + instance + " " + label
	})
	if a, b := apiservers(rootA, waiting), apiservers(rootB, waiting); a != 1 || b != 0 {
		t.Errorf("%s on host-a: %d apiservers under host-a's root, %d under host-b's", waiting, a, b)
	}
	kubectl("delete", "clusters", "--all", "--wait=true", "--timeout=300s")
}
