package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/nodeprovider"
	"socialweb.computer/kcp/internal/pki"
	"socialweb.computer/kcp/internal/processrunner"
)

// Certificates valid for 40 s, renewed at half their validity: the cluster and the front
// serve across several renewals of everything they hold. A client built from the
// kubeconfig Secret as it is delivered again works after each; once the renewals are
// behind it, our CCM initializes a new node and a new Deployment's pods are scheduled; and
// no certificate in the cluster's or the front's DataDir is ever past its expiry.
func TestCertificatesRenewWhileTheClusterServes(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl", "kwok")
	root := livetest.DataRoot(t)
	_, _, metricsURL := startServeWith(t, exe, bin, root, "31750-31799", "--cert-validity", "40s", "--cert-renew-share", "0.5")
	dataDir := clusterprovider.DataDirOf(root, "renew")
	expired := watchExpiry(t, dataDir, filepath.Join(root, clusterprovider.FrontName))
	// The front is renewed too, every 20 s: a request to it fails while it restarts, and is
	// made again.
	operator := filepath.Join(root, "operator.kubeconfig")
	kubectl := func(args ...string) string {
		t.Helper()
		var out []byte
		eventually(t, time.Minute, fmt.Sprintf("kubectl %v", args), func() (bool, string) {
			var err error
			out, err = exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", operator}, args...)...).CombinedOutput()
			return err == nil, string(out)
		})
		return string(out)
	}
	apply(t, kubectl, "apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: renew, namespace: default}\nspec: {account: acme}\n")
	issued := func() string {
		return kubectl("get", "clusters", "renew", "-o", "jsonpath={.status.phase} {.status.certificatesIssued}")
	}
	eventually(t, 4*time.Minute, "Cluster renew Ready", func() (bool, string) {
		s := issued()
		return strings.HasPrefix(s, "Ready "), s
	})
	ctx := context.Background()
	seen, certs := []string{}, []string{}
	for len(seen) < 4 { // the first minting and three renewals
		var s string
		eventually(t, 3*time.Minute, fmt.Sprintf("renewal %d of cluster renew's certificates", len(seen)), func() (bool, string) {
			s = issued()
			return strings.HasPrefix(s, "Ready ") && !slices.Contains(seen, s), s
		})
		seen = append(seen, s)
		// The tenant's kubeconfig as delivered now: a client of it works, and it holds a
		// client certificate unlike the last one.
		var raw []byte
		eventually(t, time.Minute, "a working client from the kubeconfig delivered after "+s, func() (bool, string) {
			raw = decoded(t, []byte(kubectl("get", "secret", "renew-kubeconfig", "-o", "jsonpath={.data.kubeconfig}")))
			c, err := clientOf(raw)
			if err != nil {
				return false, err.Error()
			}
			_, err = c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return err == nil, fmt.Sprint(err)
		})
		cert := string(certrenewal.KubeconfigCert(raw))
		if slices.Contains(certs, cert) {
			t.Fatalf("after %s the kubeconfig Secret holds a client certificate delivered before", s)
		}
		certs = append(certs, cert)
	}
	t.Logf("the cluster's certificates, minted and renewed: %v", seen)
	if n := livetest.MetricValue(t, metricsURL, `socialweb_cluster_certificate_expiry_timestamp_seconds{cluster="default/renew"}`); time.Until(time.Unix(int64(n), 0)) <= 0 {
		t.Errorf("the soonest expiry in the metrics is past: %v", time.Unix(int64(n), 0))
	}
	if d := livetest.MetricValue(t, metricsURL, `socialweb_cluster_certificate_days_left{cluster="default/renew"}`); d <= 0 || d > 40.0/86400 {
		t.Errorf("days left on the soonest certificate: %v, want within its 40 s", d)
	}

	tenant := func() kubernetes.Interface {
		c, err := clientOf(decoded(t, []byte(kubectl("get", "secret", "renew-kubeconfig", "-o", "jsonpath={.data.kubeconfig}"))))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	apply(t, kubectl, "apiVersion: socialweb.computer/v1alpha1\nkind: Node\nmetadata: {name: renew-n1, namespace: default}\nspec: {cluster: renew, nodeID: n1}\n")
	eventually(t, 2*time.Minute, "our CCM initializes the new node renew-n1", func() (bool, string) {
		n, err := tenant().CoreV1().Nodes().Get(ctx, "renew-n1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == nodeprovider.UninitializedTaint })
		return !tainted && n.Spec.ProviderID == "socialweb://renew/renew-n1", fmt.Sprintf("providerID %q, tainted %v", n.Spec.ProviderID, tainted)
	})
	two := int32(2)
	labels := map[string]string{"app": "after-renewals"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "after-renewals"}, Spec: appsv1.DeploymentSpec{Replicas: &two,
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}}}}}
	eventually(t, time.Minute, "the Deployment created", func() (bool, string) {
		_, err := tenant().AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, 2*time.Minute, "the Deployment's 2 pods scheduled", func() (bool, string) {
		pods, err := tenant().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=after-renewals"})
		if err != nil {
			return false, err.Error()
		}
		var on []string
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				on = append(on, p.Name+"@"+p.Spec.NodeName)
			}
		}
		return len(on) == 2, fmt.Sprint(on)
	})
	if e := expired(); len(e) > 0 {
		t.Fatalf("certificates past their expiry while the cluster ran: %v", e)
	}
}

// A provider killed with kill -9 in the middle of a renewal (its cluster's old processes
// stopped, the new ones not yet Ready) finishes it once started again: the cluster is Ready
// with every leaf minted after the request, the request is gone, and one process of each
// component runs.
func TestAKill9MidRenewalIsFinishedByTheNextRun(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl", "kwok")
	root := livetest.DataRoot(t)
	r, kubectl, _ := startServe(t, exe, bin, root, "31750-31799")
	apply(t, kubectl, "apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: midway, namespace: default}\nspec: {account: acme}\n")
	phase := func() string { return kubectl("get", "clusters", "midway", "-o", "jsonpath={.status.phase}") }
	eventually(t, 4*time.Minute, "Cluster midway Ready", func() (bool, string) { p := phase(); return p == "Ready", p })
	dataDir := clusterprovider.DataDirOf(root, "midway")
	apiserver := []string{filepath.Join(bin, "kube-control-plane")}
	old, _ := processrunner.FindByMarker(dataDir+"/", apiserver)
	if len(old) != 1 {
		t.Fatalf("cluster midway's apiservers: %v", old)
	}
	asked := time.Now()
	request := clusterstack.Layout{Root: dataDir}.RenewRequest()
	if err := certrenewal.Request(request, "the test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the renewal's restart stops the old apiserver", func() (bool, string) {
		return !old[0].Alive(), fmt.Sprintf("pid %d alive", old[0].Pid)
	})
	r.Cmd.Process.Signal(syscall.SIGKILL)
	r.Cmd.Wait()
	_, kubectl, _ = startServe(t, exe, bin, root, "31750-31799")
	eventually(t, 4*time.Minute, "Cluster midway Ready again", func() (bool, string) {
		s := kubectl("get", "clusters", "midway", "-o", "jsonpath={.status.phase} {.status.certificatesIssued}")
		p, at, _ := strings.Cut(s, " ")
		issued, _ := time.Parse(time.RFC3339, at)
		return p == "Ready" && !issued.Before(asked.Truncate(time.Second)), s
	})
	if certrenewal.Requested(request) {
		t.Error("the renewal request is still there")
	}
	certs, err := certrenewal.Inventory(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range certs {
		if !c.CA && c.NotBefore.Add(pki.Backdate).Before(asked.Truncate(time.Second)) {
			t.Errorf("%s (%s) was minted at %s, before the renewal was asked for at %s", c.Path, c.Subject, c.NotBefore.Add(pki.Backdate), asked)
		}
	}
	for _, prog := range livetest.StackPrograms(bin) {
		if ids, _ := processrunner.FindByMarker(dataDir+"/", []string{prog}); len(ids) > 1 {
			t.Errorf("%d processes of %s run for cluster midway, want one at most", len(ids), filepath.Base(prog))
		}
	}
	if _, err := tenantOf(t, root, "midway").CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("the tenant after the renewal: %v", err)
	}
}

// watchExpiry reads every certificate under dirs every 200 ms until the test ends; the
// func it returns says which it found past their expiry, and when.
func watchExpiry(t *testing.T, dirs ...string) func() []string {
	var (
		mu      sync.Mutex
		expired []string
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				for _, d := range dirs {
					certs, _ := certrenewal.Inventory(d) // a DataDir not made yet, a file being replaced: read again next tick
					for _, c := range certs {
						if !now.Before(c.NotAfter) {
							mu.Lock()
							expired = append(expired, fmt.Sprintf("%s (%s) expired %s, seen at %s", c.Path, c.Subject, c.NotAfter.Format(time.RFC3339), now.Format(time.RFC3339)))
							mu.Unlock()
						}
					}
				}
			}
		}
	})
	t.Cleanup(func() { close(done); wg.Wait() })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(expired)
	}
}

// apply applies a manifest given as text.
func apply(t *testing.T, kubectl func(args ...string) string, manifest string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", file)
}

// decoded is a Secret's value as jsonpath prints it: base64.
func decoded(t *testing.T, b64 []byte) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(string(b64))
	if err != nil {
		t.Fatalf("the kubeconfig Secret's value: %v", err)
	}
	return b
}

func clientOf(raw []byte) (kubernetes.Interface, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 5 * time.Second
	return kubernetes.NewForConfig(cfg)
}
