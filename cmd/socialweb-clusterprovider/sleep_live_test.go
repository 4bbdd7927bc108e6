package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/processrunner"
)

// sleepDoor is the front door of the sleep test: a fixed port, as a restarted provider
// must come back where the kubeconfig it delivered says.
const sleepDoor = "127.0.0.1:31990"

// An idle cluster sleeps (no process, no lease, data kept) and the first request through
// the front door wakes it: kubectl finds what was written before it slept; 20 concurrent
// requests share one wake; kill -9 of the provider while the cluster sleeps, and again
// while it wakes, leaves it asleep after the restart with nothing running twice, and a
// request then wakes it as before.
func TestAnIdleClusterSleepsAndARequestWakesIt(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	root := livetest.DataRoot(t)
	serve := func() (*running, func(args ...string) string, string) {
		return startServeWith(t, exe, bin, root, "31900-31989", "--front-door", sleepDoor, "--base-domain", "kcp.test")
	}
	r, kubectl, metricsURL := serve()
	manifest := filepath.Join(t.TempDir(), "cluster.yaml")
	os.WriteFile(manifest, []byte(`apiVersion: socialweb.computer/v1alpha1
kind: Cluster
metadata: {name: s, namespace: default}
spec: {account: acme, sleepAfter: 5s}
`), 0o600)
	kubectl("apply", "-f", manifest)
	status := func() string {
		return kubectl("get", "clusters", "s", "-o", "jsonpath={.status.phase} {.status.conditions[?(@.type==\"Ready\")].reason}")
	}
	waitPhase := func(want string) {
		t.Helper()
		eventually(t, 4*time.Minute, "Cluster s "+want, func() (bool, string) {
			s := status()
			return strings.HasPrefix(s, want), s
		})
	}
	waitPhase("Ready ")
	raw, err := base64.StdEncoding.DecodeString(kubectl("get", "secret", "s-kubeconfig", "-o", "jsonpath={.data.kubeconfig}"))
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "s.kubeconfig")
	os.WriteFile(kc, raw, 0o600)
	// This host resolves no name under kcp.test: dial the front door, say the name in TLS.
	tenantKubectl := func(args ...string) (string, error) {
		out, err := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", kc, "--server", "https://" + sleepDoor, "--tls-server-name", "s.kcp.test", "--request-timeout", "3m"}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	// This client's own transport, as client-go builds one (HTTP/1.1 here: 20 concurrent
	// requests are 20 connections), so that it can be closed: an open connection keeps a
	// cluster awake, an idle kept-alive one too.
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	transport := &http.Transport{TLSClientConfig: tlsConfig, TLSHandshakeTimeout: 10 * time.Second,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", sleepDoor)
		}}
	cfg.Transport, cfg.TLSClientConfig = transport, rest.TLSClientConfig{}
	cfg.QPS, cfg.Burst = 100, 100
	tenant, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer transport.CloseIdleConnections()
	if out, err := tenantKubectl("create", "configmap", "kept", "--from-literal=before=sleep"); err != nil {
		t.Fatalf("create a ConfigMap through the front door: %v\n%s", err, out)
	}

	dataDir := filepath.Join(root, "clusters", "s")
	running := func() []processrunner.Identity {
		ids, _ := processrunner.FindByMarker(dataDir+"/", livetest.StackPrograms(bin))
		return ids
	}
	asleep := func() {
		t.Helper()
		waitPhase("Sleeping Sleeping")
		if ids := running(); len(ids) > 0 {
			t.Errorf("asleep, yet %d of its processes run: %v", len(ids), ids)
		}
		if l := leaseOf(t, root, "s"); l != nil {
			t.Errorf("asleep, yet its port %d is leased", l.Port)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "pki")); err != nil {
			t.Errorf("asleep: its data: %v", err)
		}
	}
	wakes := func() int { return int(livetest.MetricValue(t, metricsURL, "socialweb_cluster_wake_seconds_count")) }

	t.Log("it sleeps, and kubectl wakes it")
	{
		asleep()
		t0 := time.Now()
		out, err := tenantKubectl("get", "configmap", "kept", "-o", "jsonpath={.data.before}")
		if err != nil || out != "sleep" {
			t.Fatalf("kubectl get configmap kept on a sleeping cluster: %q, %v", out, err)
		}
		t.Logf("kubectl answered %.1fs after it asked a sleeping cluster", time.Since(t0).Seconds())
		if n := wakes(); n != 1 {
			t.Errorf("wakes = %d, want 1", n)
		}
		if lw := kubectl("get", "clusters", "s", "-o", "jsonpath={.status.lastWake}"); lw == "" {
			t.Error("status.lastWake is empty after a wake")
		}
	}

	t.Log("20 concurrent requests share one wake")
	{
		asleep()
		before := wakes()
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cm, err := tenant.CoreV1().ConfigMaps("default").Get(context.Background(), "kept", metav1.GetOptions{})
				if err == nil && cm.Data["before"] != "sleep" {
					err = fmt.Errorf("request %d: ConfigMap kept = %v", i, cm.Data)
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		if n := wakes() - before; n != 1 {
			t.Errorf("20 concurrent requests caused %d wakes, want 1", n)
		}
		if _, err := tenant.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "awake"}}, metav1.CreateOptions{}); err != nil {
			t.Errorf("a write to the woken cluster: %v", err)
		}
		transport.CloseIdleConnections()
	}

	t.Log("kill -9 of the provider while the cluster sleeps")
	{
		asleep()
		r.Cmd.Process.Signal(syscall.SIGKILL)
		r.Cmd.Wait()
		r, kubectl, metricsURL = serve()
		// A restarted provider finds it asleep by its written phase and starts nothing.
		asleep()
		if out, err := tenantKubectl("get", "configmap", "awake", "-o", "name"); err != nil || out != "configmap/awake" {
			t.Fatalf("kubectl after the restart: %q, %v", out, err)
		}
	}

	t.Log("kill -9 of the provider while the cluster wakes")
	{
		asleep()
		// A request starts the wake; the provider dies once the wake's first process runs.
		req := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kc, "--server", "https://"+sleepDoor, "--tls-server-name", "s.kcp.test", "get", "ns")
		if err := req.Start(); err != nil {
			t.Fatal(err)
		}
		defer req.Process.Kill()
		eventually(t, 2*time.Minute, "the wake under way", func() (bool, string) { ids := running(); return len(ids) > 0, fmt.Sprint(len(ids), " processes") })
		r.Cmd.Process.Signal(syscall.SIGKILL)
		r.Cmd.Wait()
		req.Process.Kill()
		req.Wait()
		r, kubectl, metricsURL = serve()
		// The request that asked for the wake died with the connection: the restarted
		// provider reaps the half-woken group and lets the cluster sleep on.
		asleep()
		out, err := tenantKubectl("get", "configmap", "kept", "-o", "jsonpath={.data.before}")
		if err != nil || out != "sleep" {
			t.Fatalf("kubectl after the restart: %q, %v", out, err)
		}
		perProgram := map[string]int{}
		for _, id := range running() {
			perProgram[id.Cmdline[0]]++
		}
		for prog, n := range perProgram {
			if n > 1 && !strings.HasSuffix(prog, "postgres") {
				t.Errorf("%d of %s", n, prog)
			}
		}
	}
	kubectl("delete", "-f", manifest, "--wait=true", "--timeout=120s")
	if ids := running(); len(ids) > 0 {
		t.Errorf("deleted, yet %d processes run: %v", len(ids), ids)
	}
}

// leaseOf is the port lease the provider under root holds for cluster's apiserver, or nil.
func leaseOf(t *testing.T, root, cluster string) *portallocator.Lease {
	t.Helper()
	book, err := portallocator.Open(filepath.Join(root, "leases.json"), portallocator.Range{First: 1024, Last: 1024}) // read, never acquired from
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range book.Leases() {
		if l.Holder == cluster+"/kube-apiserver" {
			return &l
		}
	}
	return nil
}
