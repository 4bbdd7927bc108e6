package clusterprovider

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"socialweb.computer/kcp/internal/cloudprovider/contract"
	"socialweb.computer/kcp/internal/instancesnapshot"
	"socialweb.computer/kcp/internal/leftovers"

	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/guestimage"
	"socialweb.computer/kcp/internal/guestnet"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/nodeprovider"
	"socialweb.computer/kcp/internal/portallocator"
)

// realProvider is a live provider with control groups, which real guests need, and the
// guest binaries installed.
func realProvider(t *testing.T, opts ...func(*Config)) *Provider {
	t.Helper()
	var h *cgroups.Hierarchy
	p, _ := liveProvider(t, append(opts, func(c *Config) {
		var err error
		if h, err = cgroups.Detect(cgroups.Mount, CgroupSubtree(c.DataRoot)); err != nil {
			livetest.Need(t, err.Error())
		}
		c.Cgroups = h
	})...)
	for _, b := range GuestBinaries {
		if _, err := os.Stat(filepath.Join(p.cfg.BinDir, b)); err != nil {
			livetest.Need(t, b+" is not installed; run "+InstallHint)
		}
	}
	for _, b := range []string{"/usr/sbin/runc", "/usr/lib/cni/bridge", "/usr/sbin/iptables", guestimage.BusyboxBinary} {
		if _, err := os.Stat(b); err != nil {
			livetest.Need(t, b+" is not installed; run "+InstallHint)
		}
	}
	t.Cleanup(func() { h.Group().RemoveEverywhere() })
	return p
}

// kubectl runs the project's kubectl against c as its tenant.
func kubectl(t *testing.T, c *Cluster, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "kubectl"), append([]string{"--kubeconfig", c.TenantKubeconfig}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Two real guests join one cluster from their user data alone; each Node is Ready and
// initialized by our CCM with the guest's InternalIP. A pod prints hello and kubectl logs,
// exec and port-forward reach pods through the kubelets; pods on the two guests reach each
// other by pod IP and through a ClusterIP Service; another cluster's guest reaches none of
// it; the kubelets refuse anonymous requests and the join token can do nothing after the
// join; removing a guest moves its pods to the other one and leaves nothing of it; the
// cluster's teardown leaves nothing of the rest.
func TestRealGuestsJoinAndRunPods(t *testing.T) {
	p := realProvider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	hostBefore := livetest.GuestNetworks(t)
	c := up(t, p, "real")
	t.Cleanup(func() { dumpGuestLogs(t, c) })
	admin := clientFor(t, c.TenantKubeconfig)

	// An image of the tenant's own, loaded while n1 alone runs: n1 imports it now, n2
	// when it boots. A file that is no image archive is refused and nothing is kept.
	own := filepath.Join(t.TempDir(), "own.tar")
	writeImage(t, own, guestimage.Image{Name: "example.local/own:1", Cmd: []string{"/bin/echo", "loaded"}, Files: guestimage.Busybox(readFile(t, guestimage.BusyboxBinary)).Files})
	bogus := filepath.Join(t.TempDir(), "bogus.tar")
	os.WriteFile(bogus, []byte("not a tar"), 0o600)

	var guests []nodeprovider.Guest
	for _, id := range []string{"n1", "n2"} {
		if id == "n2" {
			if _, err := LoadImages(ctx, c.DataDir, []string{own, bogus}); err == nil || !strings.Contains(err.Error(), "bogus.tar") {
				t.Errorf("loading a bogus archive: %v, want an error naming it", err)
			}
			if kept, _ := filepath.Glob(filepath.Join(c.DataDir, "images", "*")); len(kept) > 0 {
				t.Errorf("a refused load kept %v", kept)
			}
			loaded, err := LoadImages(ctx, c.DataDir, []string{own})
			if err != nil || len(loaded) != 1 || !slices.Equal(loaded[0].Guests, []string{"n1"}) || !slices.Equal(loaded[0].Names, []string{"example.local/own:1"}) {
				t.Fatalf("images load: %+v %v, want example.local/own:1 into n1", loaded, err)
			}
		}
		t0 := time.Now()
		g, err := c.AddNodeOf(ctx, id, nodeprovider.KindReal)
		if err != nil {
			t.Fatalf("add real guest %s: %v", id, err)
		}
		t.Logf("real guest %s Ready and initialized in %.2fs at %s", g.Name, time.Since(t0).Seconds(), g.InternalIP)
		guests = append(guests, g)
	}
	listed, err := c.Instances()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range guests {
		n, err := admin.CoreV1().Nodes().Get(ctx, g.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var internal string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = a.Address
			}
		}
		inSnapshot := slices.ContainsFunc(listed, func(in instancesnapshot.Instance) bool {
			return in.Name == g.Name && slices.Contains(in.Addresses, instancesnapshot.Address{Type: "InternalIP", Address: g.InternalIP.String()})
		})
		if internal != g.InternalIP.String() || !inSnapshot || n.Labels[contract.ClusterLabel] != c.Name || n.Labels[nodeprovider.GuestLabel] != nodeprovider.KindReal ||
			!strings.HasPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://2.") {
			t.Errorf("node %s: InternalIP %q (want %s, in nodes.json: %v), labels %v, runtime %q", n.Name, internal, g.InternalIP, inSnapshot, n.Labels, n.Status.NodeInfo.ContainerRuntimeVersion)
		}
	}

	must := func(args ...string) string {
		t.Helper()
		out, err := kubectl(t, c, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return out
	}
	// A pod prints hello; its log is read through the kubelet.
	must("run", "hello", "--image="+guestimage.BusyboxImage, "--restart=Never", "--", "echo", "hello")
	must("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/hello", "--timeout=120s")
	if out := must("logs", "hello"); out != "hello" {
		t.Fatalf("kubectl logs hello = %q, want hello", out)
	}

	// A guest's containers share the host's kernel as root: no privileged container is
	// admitted, and no hostPath by default (PodSecurity baseline).
	if out, err := kubectl(t, c, "run", "priv", "--image="+guestimage.BusyboxImage, "--privileged", "--", "true"); err == nil || !strings.Contains(out, "privileged") {
		t.Errorf("a privileged pod: %v %s, want it refused", err, out)
	}
	if out, err := kubectl(t, c, "run", "hostpath", "--image="+guestimage.BusyboxImage,
		`--overrides={"spec":{"volumes":[{"name":"root","hostPath":{"path":"/"}}],"containers":[{"name":"hostpath","image":"`+guestimage.BusyboxImage+`","volumeMounts":[{"name":"root","mountPath":"/host"}]}]}}`); err == nil || !strings.Contains(out, "hostPath") {
		t.Errorf("a hostPath pod: %v %s, want it refused", err, out)
	}

	// The loaded image runs on both guests, n2 having had it from its boot.
	for _, g := range guests {
		pod := "own-" + g.NodeID
		must("run", pod, "--image=example.local/own:1", "--image-pull-policy=Never", "--restart=Never", `--overrides={"spec":{"nodeName":"`+g.Name+`"}}`)
		must("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/"+pod, "--timeout=120s")
		if out := must("logs", pod); out != "loaded" {
			t.Errorf("kubectl logs %s = %q, want loaded", pod, out)
		}
	}

	// A web server on each guest, a client on n1, and a Service in front of the servers.
	for _, g := range guests {
		must("run", "web-"+g.NodeID, "--image="+guestimage.BusyboxImage, "--labels=app=web", "--port=8080",
			`--overrides={"spec":{"nodeName":"`+g.Name+`"}}`, "--", "sh", "-c", "trap 'exit 0' TERM; mkdir /www && hostname > /www/index.html; httpd -f -p 8080 -h /www & wait")
	}
	must("run", "client", "--image="+guestimage.BusyboxImage, `--overrides={"spec":{"nodeName":"`+guests[0].Name+`"}}`, "--", "sleep", "3600")
	must("expose", "pod", "web-n2", "--name=web", "--port=80", "--target-port=8080", "--selector=app=web")
	must("wait", "--for=condition=Ready", "pod/web-n1", "pod/web-n2", "pod/client", "--timeout=120s")
	podIP := must("get", "pod", "web-n2", "-o", "jsonpath={.status.podIP}")
	clusterIP := must("get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")

	// exec, and from the client on n1 the pod on n2 by its IP.
	if out := must(httpGet("client", podIP+" 8080")...); !strings.HasSuffix(out, "web-n2") {
		t.Errorf("client on n1 got %q from %s (web-n2 on n2), want web-n2", out, podIP)
	}
	// Through the Service: kube-proxy on n1 programs it once it has seen the endpoints.
	var got string
	waitFor(t, ctx, "the Service "+clusterIP+" answering the client", func() bool {
		got, _ = kubectl(t, c, httpGet("client", clusterIP+" 80")...)
		return strings.HasSuffix(got, "web-n1") || strings.HasSuffix(got, "web-n2")
	})

	// port-forward, through the apiserver and n2's kubelet.
	pf := exec.CommandContext(ctx, filepath.Join(binDir(t), "kubectl"), "--kubeconfig", c.TenantKubeconfig, "port-forward", "pod/web-n2", ":8080")
	stdout, _ := pf.StdoutPipe()
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { pf.Process.Kill(); pf.Wait() }()
	line, _ := bufio.NewReader(stdout).ReadString('\n') // Forwarding from 127.0.0.1:PORT -> 8080
	addr := strings.Fields(strings.TrimPrefix(line, "Forwarding from "))
	if len(addr) == 0 {
		t.Fatalf("kubectl port-forward said %q", line)
	}
	resp, err := http.Get("http://" + addr[0])
	if err != nil {
		t.Fatalf("through port-forward: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != "web-n2" {
		t.Errorf("through port-forward got %q, want web-n2", body)
	}

	// The kubelet refuses anonymous requests.
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if resp, err := insecure.Get("https://" + net.JoinHostPort(guests[0].InternalIP.String(), "10250") + "/pods"); err != nil {
		t.Errorf("kubelet of n1: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("an anonymous GET /pods of n1's kubelet: %s, want 401", resp.Status)
		}
	}
	// The join token can do nothing but bootstrapping after the join.
	ud, err := os.ReadFile(filepath.Join(nodeprovider.Dir(c.DataDir, "n1"), "user-data"))
	if err != nil {
		t.Fatal(err)
	}
	tok := regexp.MustCompile(`token: ([a-z0-9]{6}\.[a-z0-9]{16})`).FindSubmatch(ud)
	if tok == nil {
		t.Fatal("no token in n1's user data")
	}
	bootstrap, err := kubernetes.NewForConfig(&rest.Config{Host: c.Spec.URL(), BearerToken: string(tok[1]), TLSClientConfig: rest.TLSClientConfig{CAFile: c.Spec.Layout().CACert()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bootstrap.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the join token listing Secrets: %v, want Forbidden", err)
	}
	if _, err := bootstrap.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the join token listing Pods: %v, want Forbidden", err)
	}

	// Another cluster's guest reaches neither the guests nor the pods of this one. Its
	// provider runs the same binaries through a directory of links, so that one can go.
	links := t.TempDir()
	ents, _ := os.ReadDir(binDir(t))
	for _, e := range ents {
		os.Symlink(filepath.Join(binDir(t), e.Name()), filepath.Join(links, e.Name()))
	}
	p2 := realProvider(t, func(cfg *Config) { cfg.BinDir, cfg.Ports = links, portallocator.Range{First: 31200, Last: 31299} })
	o := up(t, p2, "other")
	t.Cleanup(func() { dumpGuestLogs(t, o) })
	if _, err := o.AddNodeOf(ctx, "o1", nodeprovider.KindReal); err != nil {
		t.Fatalf("add real guest o1 to other: %v", err)
	}
	if out, err := kubectl(t, o, "run", "probe", "--image="+guestimage.BusyboxImage, "--restart=Never", "--", "sh", "-c",
		httpGetScript(podIP+" 8080")+"; "+httpGetScript(guests[1].InternalIP.String()+" 10250")+"; echo done"); err != nil {
		t.Fatalf("kubectl run probe: %v: %s", err, out)
	}
	if out, err := kubectl(t, o, "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/probe", "--timeout=120s"); err != nil {
		t.Fatalf("pod probe: %v: %s", err, out)
	}
	if out, _ := kubectl(t, o, "logs", "probe"); strings.Contains(out, "web-n2") || strings.Contains(out, "HTTP/") || !strings.Contains(out, "done") {
		t.Errorf("a pod of another cluster reached this one's: %q", out)
	}
	// A guest whose kubelet is missing: a clear error naming it, the guest unlisted again,
	// nothing of it left, the cluster's other guest untouched.
	os.Remove(filepath.Join(links, "kubelet"))
	if _, err := o.AddNodeOf(ctx, "o2", nodeprovider.KindReal); err == nil || !strings.Contains(err.Error(), "kubelet") || !strings.Contains(err.Error(), "install-components") {
		t.Errorf("adding a guest without a kubelet: %v, want an error naming it and the install command", err)
	}
	if list, _ := o.Instances(); len(list) != 1 || list[0].NodeID != "o1" {
		t.Errorf("other's nodes.json after the failed add: %+v, want o1 alone", list)
	}
	if _, err := os.Stat(nodeprovider.Dir(o.DataDir, "o2")); !os.IsNotExist(err) {
		t.Errorf("the failed guest's directory is there: %v", err)
	}
	if _, err := net.InterfaceByName(guestnet.BridgeName(o.DataDir)); err != nil {
		t.Errorf("other's bridge went with the failed guest, o1 still uses it: %v", err)
	}

	// Removing n2 moves its pods to n1; nothing of n2 is left.
	must("create", "deployment", "spread", "--image="+guestimage.BusyboxImage, "--replicas=2", "--", "sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait")
	must("rollout", "status", "deployment/spread", "--timeout=120s")
	t0 := time.Now()
	if err := c.RemoveNode(ctx, "n2"); err != nil {
		t.Fatalf("remove n2: %v", err)
	}
	t.Logf("real guest n2 removed (drained, stopped, unlisted, Node deleted by the CCM) in %.2fs", time.Since(t0).Seconds())
	must("rollout", "status", "deployment/spread", "--timeout=120s")
	if out := must("get", "pods", "-l", "app=spread", "--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].spec.nodeName}"); out != guests[0].Name+" "+guests[0].Name {
		t.Errorf("spread's running pods after n2 went are on %q, want both on %s", out, guests[0].Name)
	}
	host, _ := guestnet.VethNames(c.DataDir, "n2")
	if _, err := net.InterfaceByName(host); err == nil {
		t.Errorf("n2's veth %s is still there", host)
	}
	if _, err := os.Stat(nodeprovider.Dir(c.DataDir, "n2")); !os.IsNotExist(err) {
		t.Errorf("n2's directory is still there: %v", err)
	}
	if procs, _ := leftovers.Processes(nodeprovider.Dir(c.DataDir, "n2"), []string{filepath.Join(binDir(t), "socialweb-guest")}); len(procs) > 0 {
		t.Errorf("n2's init still runs: %v", procs)
	}

	// The clusters go, real guests and all: nothing of them is left.
	for _, x := range []*Cluster{c, o} {
		if err := x.Stop(); err != nil {
			t.Errorf("stop %s: %v", x.Name, err)
		}
		if l, err := x.Leftovers(); err != nil || !l.None() {
			t.Errorf("after %s stopped: %v %v", x.Name, l, err)
		}
	}
	if left, _ := guestnet.LeftoversSince(ctx, hostBefore); len(left) > 0 {
		t.Errorf("guest networks left on the host: %v", left)
	}
}

// httpGet is kubectl exec's arguments for a GET of / at "host port" from pod, with nc:
// Debian's static busybox wget crashes in a container (its static glibc resolver).
func httpGet(pod, hostPort string) []string {
	return []string{"exec", pod, "--", "sh", "-c", httpGetScript(hostPort)}
}

func httpGetScript(hostPort string) string {
	return `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 ` + hostPort
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func writeImage(t *testing.T, path string, img guestimage.Image) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := guestimage.Write(f, img); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dumpGuestLogs shows the end of every log of c's real guests when the test failed.
func dumpGuestLogs(t *testing.T, c *Cluster) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(c.DataDir, "guests", "*", "log", "*.log"))
	logs = append(logs, c.Spec.Layout().Log("guest"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("--- %s (last %d lines)\n%s", f, min(40, len(lines)), strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}
