package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/backup"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/localname"
	"socialweb.computer/kcp/internal/parallel"
)

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// A backup of a running cluster holding 1,000 ConfigMaps, 1,000 Secrets and a CRD with 20
// objects, taken while a writer keeps writing; then:
//   - a restore into another account (namespace acct-r) under the same name, while the
//     original runs: the two are clusters of their own (the restored one under its own
//     local name), and in it every object the manifest lists is there, every Secret reads
//     back (it decrypts), and every write acknowledged before the backup began;
//   - a tampered archive, a wrong key and a name in use are refused, and leave nothing;
//   - the original cluster parked and its DataDir removed (its data lost), and restored
//     under its own name: its objects are back, and the kubeconfig from before still works
//     (its identity came back with it).
//
// And certs rotate on the restored cluster: it waits until the cluster is Ready with every
// leaf renewed, and the kubeconfigs delivered before and after both work.
func TestBackupAndRestore(t *testing.T) {
	livetest.Start(t)
	bin := livetest.BinDir(t)
	for _, b := range []string{"kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			livetest.Need(t, b+" is not installed; run deploy/install-components.sh")
		}
	}
	provider := livetest.Build(t, "socialweb.computer/kcp/cmd/socialweb-clusterprovider")
	cli := livetest.Build(t, "socialweb.computer/kcp/cmd/socialweb-kcp")
	root := livetest.DataRoot(t)
	_, operator, metricsURL := livetest.Serve(t, provider, bin, root, "32000-32099")
	work := t.TempDir()
	keyFile, otherKey := filepath.Join(work, "backup.key"), filepath.Join(work, "other.key")
	os.WriteFile(keyFile, []byte("k9vJ3n5Qx2Lr8Tz1Wc6Hb4Yd7Pf0Sg3M\n"), 0o600)
	os.WriteFile(otherKey, []byte("a different key of enough bytes\n"), 0o600)
	kcp := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "SOCIALWEB_KCP_KUBECONFIG="+operator, "SOCIALWEB_DATA_ROOT="+root)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("socialweb-kcp %s: exit %d\n%s", strings.Join(args, " "), code, out)
		return string(out), code
	}
	must := func(t *testing.T, args ...string) string {
		t.Helper()
		out, code := kcp(t, args...)
		if code != 0 {
			t.Fatalf("socialweb-kcp %v: exit %d", args, code)
		}
		return out
	}
	must(t, "up", "demo", "--timeout", "4m")
	ctx := context.Background()
	cfg := restConfig(t, filepath.Join(work, "demo.kubeconfig"))
	demo := kubernetes.NewForConfigOrDie(cfg)

	// The objects: 1,000 ConfigMaps, 1,000 Secrets, a CRD and 20 of its objects.
	err := parallel.Each(8, seq(1000), func(i int) error {
		name := fmt.Sprintf("cm-%04d", i)
		if _, err := demo.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": name}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := demo.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%04d", i)}, Data: map[string][]byte{"v": []byte("secret " + name)}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	makeWidgets(t, cfg, 20)

	// A writer that keeps writing through the backup; each write it saw acknowledged
	// before the backup began must be in it.
	var (
		mu      sync.Mutex
		written []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("w-%05d", i)
			if _, err := demo.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err == nil {
				mu.Lock()
				written = append(written, name)
				mu.Unlock()
			}
		}
	})
	mu.Lock()
	for len(written) < 20 {
		mu.Unlock()
		livetest.Eventually(t, time.Minute, "the writer writes", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return len(written) >= 20, fmt.Sprint(len(written))
		})
		mu.Lock()
	}
	before := append([]string(nil), written...)
	mu.Unlock()
	archive := filepath.Join(work, "demo.backup")
	out := must(t, "backup", "demo", "-f", archive, "--key-file", keyFile)
	close(stop)
	wg.Wait()
	if fi, err := os.Stat(archive); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the archive: %v %v", fi, err)
	}
	if !strings.Contains(out, "backed up") {
		t.Errorf("backup said: %s", out)
	}
	if v := livetest.MetricValue(t, metricsURL, `socialweb_cluster_last_backup_timestamp_seconds{cluster="default/demo"}`); time.Since(time.Unix(int64(v), 0)) > 10*time.Minute {
		t.Errorf("last backup in the metrics: %v", time.Unix(int64(v), 0))
	}
	key, _ := backup.LoadKey(keyFile)
	raw, _ := os.ReadFile(archive)
	contents, err := backup.Open(raw, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the archive: %d bytes, %d keys", len(raw), len(contents.Manifest.Keys))

	t.Run("bad input is refused and leaves nothing", func(t *testing.T) {
		tampered := filepath.Join(work, "tampered.backup")
		b := append([]byte(nil), raw...)
		b[len(b)/2] ^= 0x40
		os.WriteFile(tampered, b, 0o600)
		truncated := filepath.Join(work, "truncated.backup")
		os.WriteFile(truncated, raw[:len(raw)*2/3], 0o600)
		foreign := filepath.Join(work, "foreign.backup")
		os.WriteFile(foreign, []byte("-- PostgreSQL database dump\n"), 0o600)
		for _, c := range []struct {
			args []string
			says string
		}{
			{[]string{"restore", "bad", "-f", tampered, "--key-file", keyFile}, "damaged archive"},
			{[]string{"restore", "bad", "-f", truncated, "--key-file", keyFile}, "damaged archive"},
			{[]string{"restore", "bad", "-f", foreign, "--key-file", keyFile}, "not a socialweb-kcp backup"},
			{[]string{"restore", "bad", "-f", archive, "--key-file", otherKey}, "wrong key"},
			{[]string{"restore", "demo", "-f", archive, "--key-file", keyFile}, "exists in namespace default and runs"},
		} {
			out, code := kcp(t, c.args...)
			if code == 0 || !strings.Contains(out, c.says) {
				t.Errorf("%v: exit %d, %q; want a refusal saying %q", c.args, code, out, c.says)
			}
		}
		if out := must(t, "ls"); strings.Contains(out, "bad") {
			t.Errorf("a refused restore declared a cluster:\n%s", out)
		}
		for _, p := range []string{clusterprovider.DataDirOf(root, "bad"), clusterprovider.RestoreDirOf(root, "bad")} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("a refused restore left %s", p)
			}
		}
	})

	t.Run("into another account under the same name", func(t *testing.T) {
		if _, err := kubernetes.NewForConfigOrDie(restConfig(t, operator)).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acct-r"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		must(t, "restore", "demo", "-n", "acct-r", "-f", archive, "--key-file", keyFile, "--timeout", "4m")
		must(t, "kubeconfig", "demo", "-n", "acct-r", "--file", filepath.Join(work, "demo2.kubeconfig"))
		cfg2 := restConfig(t, filepath.Join(work, "demo2.kubeconfig"))
		checkRestored(t, kubernetes.NewForConfigOrDie(cfg2), cfg2, before)
		local := localname.Hashed("acct-r", "demo", 0)
		if _, err := os.Stat(clusterprovider.DataDirOf(root, local)); err != nil {
			t.Errorf("acct-r/demo's DataDir under its local name %s: %v", local, err)
		}
		if _, err := os.Lstat(clusterprovider.RestoreDirOf(root, local)); err == nil {
			t.Error("the restore's staging is left once the cluster is Ready")
		}
		// Its own identity: demo's kubeconfig is not trusted by acct-r's demo.
		cfgOld := restConfig(t, filepath.Join(work, "demo.kubeconfig"))
		cfgOld.Host = cfg2.Host
		if _, err := kubernetes.NewForConfigOrDie(cfgOld).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
			t.Error("demo's kubeconfig works against acct-r's demo: the restore into another account kept demo's CA")
		}
	})

	t.Run("certs rotate renews every leaf and waits for it", func(t *testing.T) {
		issued := func() string {
			var c struct {
				Status struct {
					CertificatesIssued string `json:"certificatesIssued"`
				} `json:"status"`
			}
			if err := json.Unmarshal([]byte(must(t, "status", "demo", "-n", "acct-r", "-o", "json")), &c); err != nil || c.Status.CertificatesIssued == "" {
				t.Fatalf("status.certificatesIssued of acct-r/demo: %q, %v", c.Status.CertificatesIssued, err)
			}
			return c.Status.CertificatesIssued
		}
		was := issued()
		out := must(t, "certs", "rotate", "demo", "-n", "acct-r", "--timeout", "2m")
		if !strings.Contains(out, "is Ready with certificates renewed at") {
			t.Errorf("certs rotate said: %s", out)
		}
		if now := issued(); now <= was {
			t.Errorf("certificatesIssued %s after the rotation, %s before", now, was)
		}
		// The kubeconfig delivered before still works (same CA, not expired); the one
		// delivered now does too.
		must(t, "kubeconfig", "demo", "-n", "acct-r", "--file", filepath.Join(work, "demo2-rotated.kubeconfig"))
		for _, kc := range []string{"demo2.kubeconfig", "demo2-rotated.kubeconfig"} {
			if _, err := kubernetes.NewForConfigOrDie(restConfig(t, filepath.Join(work, kc))).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
				t.Errorf("%s after the rotation: %v", kc, err)
			}
		}
	})

	t.Run("a lost cluster under its own name", func(t *testing.T) {
		must(t, "park", "demo", "--timeout", "2m")
		if err := os.RemoveAll(clusterprovider.DataDirOf(root, "demo")); err != nil {
			t.Fatal(err)
		}
		must(t, "restore", "demo", "-f", archive, "--key-file", keyFile, "--timeout", "4m")
		// The kubeconfig from before the loss still works: the CA came back, and the
		// client certificate it holds is the CA's.
		cfgBack := restConfig(t, filepath.Join(work, "demo.kubeconfig"))
		must(t, "kubeconfig", "demo", "--file", filepath.Join(work, "demo-now.kubeconfig"))
		cfgBack.Host = restConfig(t, filepath.Join(work, "demo-now.kubeconfig")).Host // the port may have changed
		checkRestored(t, kubernetes.NewForConfigOrDie(cfgBack), cfgBack, before)
	})
}

// checkRestored checks a restored cluster: its 1,000 ConfigMaps, its 1,000 Secrets with their
// values (they decrypt), the 20 widgets, and the writes acknowledged before the backup.
func checkRestored(t *testing.T, c kubernetes.Interface, cfg *rest.Config, acknowledged []string) {
	t.Helper()
	ctx := context.Background()
	cms, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, cm := range cms.Items {
		have[cm.Name] = true
	}
	for i := range 1000 {
		if n := fmt.Sprintf("cm-%04d", i); !have[n] {
			t.Errorf("ConfigMap %s is missing", n)
		}
	}
	for _, n := range acknowledged {
		if !have[n] {
			t.Errorf("ConfigMap %s, written before the backup began, is missing", n)
		}
	}
	secrets, err := c.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("the Secrets do not read back (do they decrypt?): %v", err)
	}
	values := map[string]string{}
	for _, s := range secrets.Items {
		values[s.Name] = string(s.Data["v"])
	}
	for i := range 1000 {
		if n, want := fmt.Sprintf("s-%04d", i), fmt.Sprintf("secret cm-%04d", i); values[n] != want {
			t.Errorf("Secret %s: %q, want %q", n, values[n], want)
		}
	}
	ws, err := dynamic.NewForConfigOrDie(cfg).Resource(widgets).Namespace("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(ws.Items) != 20 {
		t.Errorf("widgets: %v, %v; want 20", len(ws.Items), err)
	}
}

// makeWidgets defines the Widget CRD and makes n of them.
func makeWidgets(t *testing.T, cfg *rest.Config, n int) {
	t.Helper()
	ctx := context.Background()
	preserve := true
	crd := &apiextv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextv1.CustomResourceDefinitionSpec{Group: "example.com", Scope: apiextv1.NamespaceScoped,
			Names: apiextv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &apiextv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}}}},
	}
	if _, err := apiextensions.NewForConfigOrDie(cfg).ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	for i := range n {
		w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": fmt.Sprintf("w%d", i)}, "spec": map[string]any{"size": i}}}
		// The CRD is served a moment after it is made.
		livetest.Eventually(t, time.Minute, "widget "+w.GetName(), func() (bool, string) {
			_, err := dyn.Resource(widgets).Namespace("default").Create(ctx, w, metav1.CreateOptions{})
			return err == nil, fmt.Sprint(err)
		})
	}
}

func restConfig(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst, cfg.Timeout = 200, 400, 30*time.Second
	return cfg
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
