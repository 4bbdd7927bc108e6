package clusterprovider

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/processrunner"
	"socialweb.computer/kcp/internal/procgroup"
)

func binDir(t *testing.T) string { return livetest.BinDir(t) }

// events collects the provider's step events.
type events struct {
	mu sync.Mutex
	ev []procgroup.Event
}

func (e *events) on(_ string, ev procgroup.Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

func (e *events) reset() {
	e.mu.Lock()
	e.ev = nil
	e.mu.Unlock()
}

func (e *events) phase(p string) []procgroup.Component {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []procgroup.Component
	for _, ev := range e.ev {
		if ev.Phase == p {
			out = append(out, ev.Step)
		}
	}
	return out
}

// liveProvider makes a provider over a fresh data root in the test's temp dir; opts adjust
// its Config.
func liveProvider(t *testing.T, opts ...func(*Config)) (*Provider, *events) {
	t.Helper()
	livetest.Start(t)
	for _, b := range (&Provider{cfg: Config{BinDir: binDir(t), PostgresBin: clusterstack.DefaultPostgresBin}}).RequiredBinaries() {
		if _, err := os.Stat(b); err != nil {
			livetest.Need(t, b+" is not installed; run "+InstallHint)
		}
	}
	root := livetest.DataRoot(t)
	ev := &events{}
	cfg := Config{
		DataRoot: root, BinDir: binDir(t), Ports: portallocator.Range{First: 31000, Last: 31199},
		Grace: 10 * time.Second, OnEvent: ev.on,
	}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, ev
}

func up(t *testing.T, p *Provider, name string) *Cluster {
	t.Helper()
	return upWith(t, p, name, NodePolicy{MaxNodes: p.cfg.MaxNodes, PodsPerNode: p.cfg.PodsPerNode})
}

// upWith is up with the cluster's own policy (its limits, its object cap).
func upWith(t *testing.T, p *Provider, name string, np NodePolicy) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	c, err := p.UpWith(ctx, name, np)
	if err != nil {
		t.Fatalf("Up(%s): %v", name, err)
	}
	t.Logf("cluster %s Ready in %.2fs at %s", name, time.Since(t0).Seconds(), c.URL)
	t.Cleanup(func() { c.Stop() })
	return c
}

// clientWithCert is a client of c's apiserver that authenticates with a certificate file
// (an identity that has no kubeconfig of its own).
func clientWithCert(t *testing.T, c *Cluster, cert, key string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: c.Spec.URL(), TLSClientConfig: rest.TLSClientConfig{CAFile: c.Spec.Layout().CACert(), CertFile: cert, KeyFile: key}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestTheControlPlaneReachesReadyAtZeroNodes(t *testing.T) {
	p, ev := liveProvider(t)
	c := up(t, p, "zero")

	want := []procgroup.Component{procgroup.ComponentPostgres, procgroup.ComponentKine, procgroup.ComponentControlPlane, procgroup.ComponentCloudControllerManager}
	if got := ev.phase("ready"); !slices.Equal(got, want) {
		t.Fatalf("gates passed: %v, want %v", got, want)
	}
	ctx := context.Background()
	tenant := clientFor(t, c.TenantKubeconfig)
	nss, err := tenant.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("the tenant kubeconfig cannot list namespaces: %v", err)
	}
	var names []string
	for _, ns := range nss.Items {
		names = append(names, ns.Name)
	}
	slices.Sort(names)
	if want := []string{"default", "kube-node-lease", "kube-public", "kube-system"}; !slices.Equal(names, want) {
		// The gates prove the control plane works and leave nothing a tenant sees.
		t.Fatalf("namespaces %v, want %v", names, want)
	}
	if probes, err := tenant.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: controllersProbeLabel}); err != nil || len(probes.Items) != 0 {
		t.Fatalf("controller-manager probes left: %v, %v", probes, err)
	}
	out, err := exec.Command(filepath.Join(binDir(t), "kubectl"), "--kubeconfig", c.TenantKubeconfig, "get", "nodes", "-o", "name").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("kubectl get nodes = %q, %v; want no nodes", out, err)
	}

	// The tenant is cluster-admin through a revocable binding, not system:masters.
	who, err := tenant.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if who.Status.UserInfo.Username != TenantAdminUser || slices.Contains(who.Status.UserInfo.Groups, "system:masters") {
		t.Fatalf("tenant authenticates as %+v", who.Status.UserInfo)
	}

	// The apiserver's kubelet-client identity may use the kubelet API (logs, exec,
	// port-forward go through nodes/proxy) and nothing else.
	kubeletClient := clientWithCert(t, c, c.Spec.Layout().KubeletClientCert(), c.Spec.Layout().KubeletClientKey())
	assertAccess(t, kubeletClient, "the apiserver's kubelet client", []access{
		{authzv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "proxy"}, true},
		{authzv1.ResourceAttributes{Verb: "create", Resource: "nodes", Subresource: "proxy"}, true},
		{authzv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "log"}, true},
		{authzv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "default"}, false},
		{authzv1.ResourceAttributes{Verb: "delete", Resource: "nodes"}, false},
		{authzv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "default"}, false},
	})

	// Secrets are encrypted at rest: the value never reaches Postgres in clear.
	_, err = tenant.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"}, StringData: map[string]string{"k": "socialweb-plaintext-marker"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	assertNotInDatastore(t, c, "socialweb-plaintext-marker")

	// No secret on any component's argv, read from /proc (invariant 3).
	secrets := secretsOf(t, c.Spec.Layout())
	for _, m := range c.Group().Members() {
		argv, err := processrunner.Cmdline(m.Identity.Pid)
		if err != nil {
			t.Fatalf("%s: %v", m.Step, err)
		}
		joined := strings.Join(argv, " ")
		for _, s := range secrets {
			if strings.Contains(joined, s) {
				t.Fatalf("%s (pid %d) has a secret on its argv", m.Step, m.Identity.Pid)
			}
		}
	}

	// Files 0600, directories 0700 (the DataDir itself 0710, group postgres: see ARCHITECTURE).
	filepath.Walk(c.DataDir, func(path string, info os.FileInfo, err error) error {
		if err != nil || strings.HasPrefix(path, c.Spec.Layout().PostgresData()) || info.Mode()&os.ModeSocket != 0 {
			return nil
		}
		want := os.FileMode(0o600)
		if info.IsDir() {
			want = 0o700
			if path == c.DataDir {
				want = 0o710
			}
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, info.Mode().Perm(), want)
		}
		return nil
	})
}

// assertNotInDatastore greps kine's table for a plaintext value, as the superuser.
func assertNotInDatastore(t *testing.T, c *Cluster, plain string) {
	t.Helper()
	ctx := context.Background()
	su, _ := os.ReadFile(c.Spec.Layout().PostgresSuperuserPassword())
	conn, err := pgConnect(ctx, c.Spec, clusterstack.PostgresSuperuser, clusterstack.KineDatabase, strings.TrimSpace(string(su)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM kine WHERE name LIKE '/registry/secrets/default/probe%' AND position(convert_to($1, 'UTF8') in value) > 0`, plain).Scan(&n); err != nil {
		t.Fatal(err)
	}
	var rows int
	conn.QueryRow(ctx, `SELECT count(*) FROM kine WHERE name LIKE '/registry/secrets/default/probe%'`).Scan(&rows)
	if rows == 0 {
		t.Fatal("the secret is not in the datastore at all")
	}
	if n != 0 {
		t.Fatal("a Secret's value is stored in plaintext")
	}
}

// groupStopOrder is the reverse of the group's bring-up.
var groupStopOrder = []procgroup.Component{procgroup.ComponentCloudControllerManager, procgroup.ComponentControlPlane, procgroup.ComponentKine, procgroup.ComponentPostgres}

// stopAndCheck stops c and checks the teardown: the stop order is want, no member (the
// node group's included) nor any other process of the cluster survives, the lease is free.
func stopAndCheck(t *testing.T, p *Provider, c *Cluster, ev *events, want []procgroup.Component) time.Duration {
	t.Helper()
	members := c.Group().Members()
	if g := c.NodeGroup(); g != nil {
		members = append(members, g.Members()...)
	}
	ev.reset()
	t0 := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	if got := ev.phase("stopping"); !slices.Equal(got, want) {
		t.Fatalf("stop order %v, want %v", got, want)
	}
	for _, m := range members {
		if m.Identity.Alive() {
			t.Errorf("%s (pid %d) survived teardown", m.Step, m.Identity.Pid)
		}
	}
	assertNothingRuns(t, p, c)
	if h := p.Leases().Holder(c.Port); h != "" {
		t.Errorf("port %d still leased to %s", c.Port, h)
	}
	return took
}

// access is one SelfSubjectAccessReview and its expected answer.
type access struct {
	attr  authzv1.ResourceAttributes
	allow bool
}

// assertAccess asks, as client (who), each access review and checks the answers.
func assertAccess(t *testing.T, client kubernetes.Interface, who string, want []access) {
	t.Helper()
	for _, a := range want {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a.attr}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != a.allow {
			t.Errorf("%s may %s %s/%s: %v, want %v", who, a.attr.Verb, a.attr.Resource, a.attr.Subresource, r.Status.Allowed, a.allow)
		}
	}
}

func TestTeardownLeavesNoSurvivors(t *testing.T) {
	p, ev := liveProvider(t)
	c := up(t, p, "teardown")
	t.Logf("teardown in %.2fs", stopAndCheck(t, p, c, ev, groupStopOrder).Seconds())
	for _, sock := range []string{c.Spec.Layout().KineSocket(), c.Spec.Layout().PostgresSocket()} {
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Errorf("socket %s left behind", sock)
		}
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.DataDir); !os.IsNotExist(err) {
		t.Fatal("DataDir survived Destroy")
	}
}

// assertNothingRuns checks /proc for any process at all whose cmdline names the DataDir
// (Postgres's children included), and any of the stack's programs that names it in its
// environment (the CCM).
func assertNothingRuns(t *testing.T, p *Provider, c *Cluster) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		argv, err := processrunner.Cmdline(atoi(e.Name()))
		if err == nil && strings.Contains(strings.Join(argv, " "), c.DataDir) {
			t.Errorf("pid %s survived: %v", e.Name(), argv)
		}
	}
	if ids, _ := processrunner.FindByMarker(c.DataDir+"/", p.RequiredBinaries()); len(ids) != 0 {
		t.Errorf("survived: %v", ids)
	}
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return -1
		}
		n = n*10 + int(r-'0')
	}
	return n
}

func TestARestartKeepsTheTenantsData(t *testing.T) {
	p, _ := liveProvider(t)
	c := up(t, p, "restart")
	ctx := context.Background()
	_, err := clientFor(t, c.TenantKubeconfig).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	c2 := up(t, p, "restart")
	cm, err := clientFor(t, c2.TenantKubeconfig).CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || cm.Data["k"] != "v" {
		t.Fatalf("ConfigMap after restart: %v, %v", cm, err)
	}
}

func TestSurvivorsOfACrashedProviderAreReaped(t *testing.T) {
	p, _ := liveProvider(t)
	first := up(t, p, "crash")
	old := first.Group().Members()
	// A new provider on the same data root, as after kill -9 of the old one: the old
	// processes are still running and must be reaped, not adopted (invariant 12).
	p2, err := New(p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	second := up(t, p2, "crash")
	for _, m := range old {
		if m.Identity.Alive() {
			t.Errorf("survivor %s (pid %d) still running", m.Step, m.Identity.Pid)
		}
	}
	if second.Port != first.Port {
		t.Errorf("the restarted provider leased port %d, the book said %d", second.Port, first.Port)
	}
	if _, err := clientFor(t, second.TenantKubeconfig).CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestTheGuardRefusesAnotherClustersDatastore(t *testing.T) {
	p, ev := liveProvider(t)
	c := up(t, p, "guarded")
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	// The DataDir now claims to be a different cluster of the same name (a restored or
	// swapped datastore): the guard must stop the bring-up before the control plane.
	b, _ := json.Marshal(Identity{Cluster: "guarded", UID: "someone-else"})
	if err := os.WriteFile(c.Spec.Layout().Identity(), b, 0o600); err != nil {
		t.Fatal(err)
	}
	ev.mu.Lock()
	ev.ev = nil
	ev.mu.Unlock()
	_, err := p.Up(context.Background(), "guarded")
	if !errors.Is(err, ErrForeignDatastore) {
		t.Fatalf("Up = %v, want ErrForeignDatastore", err)
	}
	if slices.ContainsFunc(ev.phase("starting"), procgroup.Component.IsControlPlane) {
		t.Fatal("a control-plane component started on a foreign datastore")
	}
	ids, _ := processrunner.FindByMarker(c.DataDir+"/", p.RequiredBinaries())
	if len(ids) != 0 {
		t.Fatalf("processes left after the refusal: %v", ids)
	}
	if h := p.Leases().Holder(c.Port); h != "" {
		t.Fatalf("port still leased to %s", h)
	}
}
