package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

// The host guard: with --max-running-clusters 1, of two Clusters one runs and the other
// waits, Unavailable with condition HostFull, no process of it running and no port
// leased; once the running one is deleted, the waiting one starts.
func TestAFullHostHoldsTheNextCluster(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	root := livetest.DataRoot(t)
	_, kubectl, _ := startServeWith(t, exe, bin, root, "31900-31979", "--max-running-clusters", "1")
	manifest := filepath.Join(t.TempDir(), "clusters.yaml")
	os.WriteFile(manifest, []byte(`apiVersion: socialweb.computer/v1alpha1
kind: Cluster
metadata: {name: first, namespace: default}
spec: {account: acme}
---
apiVersion: socialweb.computer/v1alpha1
kind: Cluster
metadata: {name: second, namespace: default}
spec: {account: acme}
`), 0o600)
	kubectl("apply", "-f", manifest)
	state := func(name string) string {
		return kubectl("get", "clusters", name, "-o", "jsonpath={.status.phase} {.status.conditions[?(@.type==\"Ready\")].reason}")
	}
	var running, waiting string
	eventually(t, 4*time.Minute, "one Cluster Ready, the other HostFull", func() (bool, string) {
		a, b := state("first"), state("second")
		switch {
		case a == "Ready Ready" && b == "Unavailable HostFull":
			running, waiting = "first", "second"
		case b == "Ready Ready" && a == "Unavailable HostFull":
			running, waiting = "second", "first"
		}
		return running != "", fmt.Sprintf("first %q, second %q", a, b)
	})
	msg := kubectl("get", "clusters", waiting, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].message}")
	if !strings.Contains(msg, "host full: 1 of at most 1") {
		t.Errorf("the waiting cluster's condition: %q, want it to say the host is full and why", msg)
	}
	if ids, _ := processrunner.FindByMarker(filepath.Join(root, "clusters", waiting)+"/", livetest.StackPrograms(bin)); len(ids) > 0 {
		t.Errorf("%s waits for room, yet %d of its processes run: %v", waiting, len(ids), ids)
	}
	if l := leaseOf(t, root, waiting); l != nil {
		t.Errorf("%s waits for room, yet holds port %d", waiting, l.Port)
	}

	kubectl("delete", "clusters", running, "--wait=false")
	eventually(t, 4*time.Minute, waiting+" Ready once "+running+" is gone", func() (bool, string) {
		s := state(waiting)
		return s == "Ready Ready", s
	})
}
