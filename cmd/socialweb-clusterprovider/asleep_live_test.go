package main

import (
	"encoding/base64"
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

// A Cluster declared with createAsleep is Sleeping at once: its kubeconfig is delivered,
// its certificates minted for --cert-validity, but no process runs, no port is leased and
// no datastore exists. The first kubectl
// through the front door initialises and starts it and is answered; from then on it is a
// cluster like any other.
func TestAClusterCreatedAsleep(t *testing.T) {
	const door = "127.0.0.1:31980"
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	root := livetest.DataRoot(t)
	_, kubectl, metricsURL := startServeWith(t, exe, bin, root, "31900-31979", "--front-door", door, "--base-domain", "kcp.test", "--cert-validity", "720h")
	manifest := filepath.Join(t.TempDir(), "cluster.yaml")
	os.WriteFile(manifest, []byte(`apiVersion: socialweb.computer/v1alpha1
kind: Cluster
metadata: {name: z, namespace: default}
spec: {account: acme, sleepAfter: 1h, createAsleep: true}
---
apiVersion: socialweb.computer/v1alpha1
kind: Cluster
metadata: {name: idle, namespace: default}
spec: {account: acme, sleepAfter: 1h, createAsleep: true}
`), 0o600)
	kubectl("apply", "-f", manifest)
	status := func() string {
		return kubectl("get", "clusters", "z", "-o", "jsonpath={.status.phase} {.status.conditions[?(@.type==\"Ready\")].reason}")
	}
	eventually(t, 2*time.Minute, "Cluster z created asleep, its kubeconfig delivered", func() (bool, string) {
		s := status()
		return s == "Sleeping CreatedAsleep" && strings.Contains(kubectl("get", "secrets", "-o", "name"), "secret/z-kubeconfig"), s
	})
	raw, err := base64.StdEncoding.DecodeString(kubectl("get", "secret", "z-kubeconfig", "-o", "jsonpath={.data.kubeconfig}"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "server: https://z.kcp.test:31980") {
		t.Errorf("the delivered kubeconfig does not name the front door:\n%s", raw)
	}
	// Its certificates were minted for --cert-validity, and the metric says when the
	// soonest expires.
	expiry := time.Unix(int64(livetest.MetricValue(t, metricsURL, `socialweb_cluster_certificate_expiry_timestamp_seconds{cluster="default/z"}`)), 0)
	if d := time.Until(expiry); d < 719*time.Hour || d > 721*time.Hour {
		t.Errorf("soonest certificate expires in %s (at %s), want 720h (--cert-validity)", d.Round(time.Minute), expiry)
	}
	dataDir := filepath.Join(root, "clusters", "z")
	if ids, _ := processrunner.FindByMarker(dataDir+"/", livetest.StackPrograms(bin)); len(ids) > 0 {
		t.Errorf("created asleep, yet %d of its processes run: %v", len(ids), ids)
	}
	if l := leaseOf(t, root, "z"); l != nil {
		t.Errorf("created asleep, yet its port %d is leased", l.Port)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "postgres", "data")); !os.IsNotExist(err) {
		t.Errorf("created asleep, yet its datastore exists (%v)", err)
	}

	kc := filepath.Join(t.TempDir(), "z.kubeconfig")
	os.WriteFile(kc, raw, 0o600)
	t0 := time.Now()
	var out []byte
	out, err = exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kc, "--server", "https://"+door, "--tls-server-name", "z.kcp.test",
		"--request-timeout", "3m", "get", "namespace", "kube-system", "-o", "name").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "namespace/kube-system" {
		t.Fatalf("the first kubectl to a cluster created asleep: %q, %v", out, err)
	}
	t.Logf("the first kubectl was answered %.1fs after it asked (the datastore initialised on the way)", time.Since(t0).Seconds())
	if s := status(); !strings.HasPrefix(s, "Ready ") {
		t.Errorf("after the first request: %q, want Ready", s)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "postgres", "data")); err != nil {
		t.Errorf("woken, its datastore: %v", err)
	}
	if n := livetest.MetricValue(t, metricsURL, "socialweb_cluster_wake_seconds_count"); n != 1 {
		t.Errorf("wakes = %v, want 1", n)
	}

	// idle, never woken, is deleted asleep: its DataDir and Secret go with it.
	if s := kubectl("get", "clusters", "idle", "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}"); s != "CreatedAsleep" {
		t.Errorf("cluster idle: %q, want CreatedAsleep", s)
	}
	kubectl("delete", "clusters", "idle", "--wait=false")
	eventually(t, 2*time.Minute, "Cluster idle gone with its DataDir and Secret", func() (bool, string) {
		left := kubectl("get", "clusters,secrets", "-o", "name")
		_, err := os.Stat(filepath.Join(root, "clusters", "idle"))
		return !strings.Contains(left, "/idle") && os.IsNotExist(err), fmt.Sprintf("%q; DataDir: %v", left, err)
	})
}
