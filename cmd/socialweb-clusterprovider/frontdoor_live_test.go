package main

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/livetest"
)

// Two tenants behind one front-door port, used from another "host" (a network namespace
// that reaches this one only at the front door's address and knows the clusters' names
// from its hosts file): each kubeconfig reaches its own cluster only, one cluster's client
// certificate is refused by the other, names that are no cluster's are refused, and a
// watch through the front door sees every change for two minutes.
func TestTwoClustersBehindOneFrontDoor(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	other := livetest.OtherHost(t, "a.kcp.test", "b.kcp.test")
	root := livetest.DataRoot(t)
	r, kubectl, metricsURL := startServeWith(t, exe, bin, root, "31700-31749",
		"--front-door", net.JoinHostPort(other.HostIP, "0"), "--base-domain", "kcp.test")
	line := r.WaitLine(t, "front door: ")
	addr := strings.Fields(strings.TrimPrefix(line, "front door: "))[0]
	door := strings.TrimSuffix(addr, ";")
	_, port, _ := net.SplitHostPort(door)

	manifest := filepath.Join(t.TempDir(), "clusters.yaml")
	os.WriteFile(manifest, []byte(`apiVersion: socialweb.computer/v1alpha1
kind: Cluster
metadata: {name: a, namespace: default}
spec: {account: acme, extraNames: [api.a.example]}
---
apiVersion: socialweb.computer/v1alpha1
kind: Cluster
metadata: {name: b, namespace: default}
spec: {account: acme, extraNames: [api.a.example, b.other.test]}
`), 0o600)
	kubectl("apply", "-f", manifest)
	dir := t.TempDir()
	kc := map[string]string{}
	for _, c := range []string{"a", "b"} {
		eventually(t, 4*time.Minute, "Cluster "+c+" Ready", func() (bool, string) {
			out := kubectl("get", "clusters", c, "-o", "jsonpath={.status.phase} {.status.url}")
			return out == "Ready https://"+c+".kcp.test:"+port, out
		})
		raw, err := base64.StdEncoding.DecodeString(kubectl("get", "secret", c+"-kubeconfig", "-o", "jsonpath={.data.kubeconfig}"))
		if err != nil {
			t.Fatal(err)
		}
		kc[c] = filepath.Join(dir, c+".kubeconfig")
		os.WriteFile(kc[c], raw, 0o600)
		if !strings.Contains(string(raw), "server: https://"+c+".kcp.test:"+port) {
			t.Fatalf("%s's kubeconfig does not name the front door:\n%s", c, raw)
		}
	}
	// kubectl on the other host; kubectl "a" runs with a's kubeconfig.
	there := func(c string, args ...string) (string, error) {
		out, err := other.Command(append([]string{filepath.Join(bin, "kubectl"), "--kubeconfig", kc[c], "--request-timeout", "60s"}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	for _, c := range []string{"a", "b"} {
		if out, err := there(c, "create", "configmap", "whoami", "--from-literal=cluster="+c); err != nil {
			t.Fatalf("create a ConfigMap in %s through the front door: %v\n%s", c, err, out)
		}
	}
	for _, c := range []string{"a", "b"} {
		if out, err := there(c, "get", "configmap", "whoami", "-o", "jsonpath={.data.cluster}"); err != nil || out != c {
			t.Errorf("through %s's kubeconfig, whoami = %q, %v; want %s", c, out, err, c)
		}
	}
	// Extra names: each routes to the cluster that holds it, whose certificate carries it;
	// a name two clusters ask for goes to the older claim (created in the same second: the
	// name that sorts first, a), and b's Cluster says which of its names it did not get.
	for name, c := range map[string]string{"api.a.example": "a", "b.other.test": "b"} {
		if out, err := there(c, "--tls-server-name", name, "get", "configmap", "whoami", "-o", "jsonpath={.data.cluster}"); err != nil || out != c {
			t.Errorf("at %s: whoami = %q, %v; want %s", name, out, err, c)
		}
	}
	if out := kubectl("get", "clusters", "b", "-o", `jsonpath={.status.conditions[?(@.type=="ExtraNames")].message}`); !strings.Contains(out, `spec.extraNames[0] "api.a.example": is cluster a's already`) {
		t.Errorf("b's ExtraNames condition: %q, want api.a.example refused as a's", out)
	}
	// A name given while a runs: routed, and on its certificate once the apiserver has
	// reloaded it, with no restart.
	kubectl("patch", "clusters", "a", "--type", "merge", "-p", `{"spec":{"extraNames":["api.a.example","a2.example"]}}`)
	eventually(t, 2*time.Minute, "a at its new name a2.example", func() (bool, string) {
		out, err := there("a", "--tls-server-name", "a2.example", "--request-timeout", "10s", "get", "configmap", "whoami", "-o", "jsonpath={.data.cluster}")
		return err == nil && out == "a", out
	})
	// A's client certificate at B's name (trusting B's CA, so that the server check
	// passes): B's apiserver does not know it.
	bCA := filepath.Join(dir, "b-ca.crt")
	caB := kubectlOf(t, bin, kc["b"], "config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}")
	caPEM, _ := base64.StdEncoding.DecodeString(caB)
	os.WriteFile(bCA, caPEM, 0o600)
	if out, err := there("a", "--server", "https://b.kcp.test:"+port, "--certificate-authority", bCA, "get", "configmap", "whoami"); err == nil || !strings.Contains(out, "Unauthorized") {
		t.Errorf("A's certificate at B: %v\n%s\nwant Unauthorized", err, out)
	}
	// A name under the base domain that is no cluster's, a name outside it, and no name at
	// all (an IP address is never sent as one).
	for _, name := range []string{"c.kcp.test", "a.other.test"} {
		if out, err := there("a", "--tls-server-name", name, "get", "ns"); err == nil || !strings.Contains(out, "unrecognized name") {
			t.Errorf("unknown name %s: %v\n%s\nwant unrecognized name", name, err, out)
		}
	}
	if out, err := there("a", "--server", "https://"+door, "get", "ns"); err == nil || !strings.Contains(out, "unrecognized name") {
		t.Errorf("no server name: %v\n%s\nwant unrecognized name", err, out)
	}
	// The other host reaches nothing but the front door: not the apiservers' own ports.
	for _, c := range []string{"a", "b"} {
		direct := strings.TrimPrefix(kubectlOf(t, bin, clusterstack.Spec{DataDir: filepath.Join(root, "clusters", c)}.Layout().AdminKubeconfig(), "config", "view", "-o", "jsonpath={.clusters[0].cluster.server}"), "https://127.0.0.1:")
		if out, err := other.Command("bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", other.HostIP, direct)).CombinedOutput(); err == nil {
			t.Errorf("the other host connected to %s's apiserver port %s directly\n%s", c, direct, out)
		}
	}

	// A watch from the other host for two minutes, a change every 10 s: every one seen.
	watch := other.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kc["a"], "get", "configmaps", "-w", "--output-watch-events", "-o", "custom-columns=EVENT:.type,NAME:.object.metadata.name", "--no-headers")
	stdout, _ := watch.StdoutPipe()
	watch.Stderr = os.Stderr
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer watch.Process.Kill()
	seen := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			seen <- strings.Join(strings.Fields(sc.Text()), " ")
		}
		close(seen)
	}()
	waitSeen := func(want string) {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			select {
			case got, ok := <-seen:
				if !ok {
					t.Fatalf("the watch ended before %q", want)
				}
				if got == want {
					return
				}
			case <-deadline:
				t.Fatalf("the watch did not see %q within a minute", want)
			}
		}
	}
	waitSeen("ADDED whoami")
	start := time.Now()
	for i := 0; time.Since(start) < 2*time.Minute; i++ {
		name := fmt.Sprintf("tick-%d", i)
		if out, err := there("a", "create", "configmap", name); err != nil {
			t.Fatalf("create %s: %v\n%s", name, err, out)
		}
		waitSeen("ADDED " + name)
		time.Sleep(10 * time.Second) // the pace of changes, not a synchronisation
	}
	t.Logf("the watch through the front door lasted %s", time.Since(start).Round(time.Second))

	res, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, series := range []string{`socialweb_frontdoor_connections_total{cluster="a"}`, `socialweb_frontdoor_connections_total{cluster="b"}`,
		`socialweb_frontdoor_open_connections{cluster="a"}`, `socialweb_frontdoor_bytes_total{cluster="a",direction="out"}`,
		`socialweb_frontdoor_refused_total{reason="unknown_cluster"}`, `socialweb_frontdoor_refused_total{reason="unknown_name"}`,
		`socialweb_frontdoor_refused_total{reason="no_server_name"}`} {
		if !strings.Contains(string(body), series+" ") || strings.Contains(string(body), series+" 0\n") {
			t.Errorf("/metrics: %s is missing or 0", series)
		}
	}
	watch.Process.Kill()
	kubectl("delete", "-f", manifest, "--wait=true", "--timeout=120s")
}

// kubectlOf runs kubectl with kubeconfig on this host and fails t on an error.
func kubectlOf(t *testing.T, bin, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).Output()
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return string(out)
}
