package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

// A provider restart costs its tenants nothing (issue 18): three clusters with objects,
// each read by a poller of its own apiserver every 100 ms; kill -9 of serve and a start
// again: no poll fails, every process is the very one (pid and start time) it was, and the
// data is there. A component of an adopted cluster that dies is noticed, and that cluster
// alone comes back. Then an upgrade: serve stops with --on-exit keep, kine's binary is
// replaced, serve starts again, adopts the three as stale and restarts them one at a time:
// never two tenants down at once, each on the new kine after.
func TestAProviderRestartCostsTenantsNothing(t *testing.T) {
	exe, livebin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl", "kwok")
	bin := privateBinDir(t, livebin, "kine")
	root := livetest.DataRoot(t)
	const ports = "31600-31699"
	r, kubectl, metricsURL := startServeWith(t, exe, bin, root, ports, "--on-exit", "keep")
	names := []string{"a", "b", "c"}
	var manifest strings.Builder
	for _, n := range names {
		fmt.Fprintf(&manifest, "apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: %s, namespace: default}\nspec: {account: acme}\n---\n", n)
	}
	manifest.WriteString("apiVersion: socialweb.computer/v1alpha1\nkind: Node\nmetadata: {name: a-n1, namespace: default}\nspec: {cluster: a, nodeID: n1}\n")
	file := filepath.Join(t.TempDir(), "clusters.yaml")
	os.WriteFile(file, []byte(manifest.String()), 0o600)
	kubectl("apply", "-f", file)
	phase := func(name string) string { return kubectl("get", "clusters", name, "-o", "jsonpath={.status.phase}") }
	for _, n := range names {
		eventually(t, 4*time.Minute, "Cluster "+n+" Ready", func() (bool, string) { p := phase(n); return p == "Ready", p })
	}
	eventually(t, 2*time.Minute, "Node a-n1 Ready", func() (bool, string) {
		p := kubectl("get", "nodes.socialweb.computer", "a-n1", "-o", "jsonpath={.status.phase}")
		return p == "Ready", p
	})
	ctx := context.Background()
	for _, n := range names {
		_, err := tenantOf(t, root, n).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"cluster": n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	programs := []string{filepath.Join(bin, "kwok"), filepath.Join(bin, "kine"), filepath.Join(bin, "kube-control-plane"), filepath.Join(bin, "kube-apiserver"), filepath.Join(bin, "kube-controller-manager"),
		filepath.Join(bin, "kube-scheduler"), filepath.Join(bin, "socialweb-cloud-controller-manager"), "/usr/lib/postgresql/15/bin/postgres"}
	processes := func(marker string) []string {
		ids, _ := processrunner.FindByMarker(marker, programs)
		var out []string
		for _, id := range ids {
			out = append(out, fmt.Sprintf("%d@%d %s", id.Pid, id.StartTime, filepath.Base(id.Cmdline[0])))
		}
		slices.Sort(out)
		return out
	}

	parent := t // each serve outlives the subtest that starts it
	t.Run("kill -9 of serve, and a start again: no tenant sees it", func(t *testing.T) {
		polls := startPollers(t, root, names)
		before := processes(root + "/")
		polls.waitRounds(t, 5)
		r.Cmd.Process.Signal(syscall.SIGKILL)
		r.Cmd.Wait()
		polls.waitRounds(t, 5) // the tenants while no provider runs at all
		t0 := time.Now()
		r, kubectl, metricsURL = startServeWith(parent, exe, bin, root, ports, "--on-exit", "keep")
		eventually(t, time.Minute, "3 clusters adopted", func() (bool, string) {
			n := livetest.MetricValue(t, metricsURL, `socialweb_clusters_adopted_total{state="current"}`)
			return n == 3, fmt.Sprint(n)
		})
		t.Logf("the provider back, its 3 clusters adopted, %.2fs after its start", time.Since(t0).Seconds())
		for _, n := range names {
			if p := phase(n); p != "Ready" {
				t.Errorf("Cluster %s: %s after its adoption, want Ready", n, p)
			}
		}
		polls.waitRounds(t, 5)
		if down := polls.stop(); len(down) != 0 {
			t.Fatalf("tenants saw the restart: %v", down)
		}
		if after := processes(root + "/"); !slices.Equal(before, after) {
			t.Fatalf("processes changed across the restart:\nbefore %v\nafter  %v", before, after)
		}
		for _, n := range names {
			cm, err := tenantOf(t, root, n).CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
			if err != nil || cm.Data["cluster"] != n {
				t.Errorf("cluster %s's ConfigMap: %v, %v", n, cm, err)
			}
		}
		eventually(t, time.Minute, "Node a-n1 Ready after the restart", func() (bool, string) {
			p := kubectl("get", "nodes.socialweb.computer", "a-n1", "-o", "jsonpath={.status.phase}")
			return p == "Ready", p
		})
	})

	t.Run("an adopted cluster whose component dies comes back, alone", func(t *testing.T) {
		sched := filepath.Join(bin, "kube-control-plane")
		victim, _ := processrunner.FindByMarker(filepath.Join(root, "clusters", "a")+"/", []string{sched})
		others := append(processes(filepath.Join(root, "clusters", "b")+"/"), processes(filepath.Join(root, "clusters", "c")+"/")...)
		if len(victim) != 1 {
			t.Fatalf("cluster a's control planes: %v", victim)
		}
		syscall.Kill(victim[0].Pid, syscall.SIGKILL)
		eventually(t, time.Minute, "Cluster a noticed", func() (bool, string) { p := phase("a"); return p == "Unavailable", p })
		eventually(t, 3*time.Minute, "Cluster a Ready again", func() (bool, string) { p := phase("a"); return p == "Ready", p })
		again, _ := processrunner.FindByMarker(filepath.Join(root, "clusters", "a")+"/", []string{sched})
		if len(again) != 1 || again[0].Pid == victim[0].Pid {
			t.Fatalf("cluster a's scheduler after its death: %v", again)
		}
		if now := append(processes(filepath.Join(root, "clusters", "b")+"/"), processes(filepath.Join(root, "clusters", "c")+"/")...); !slices.Equal(others, now) {
			t.Fatalf("the other clusters were touched:\nbefore %v\nafter  %v", others, now)
		}
	})

	t.Run("an upgrade restarts the clusters one at a time", func(t *testing.T) {
		r.Cmd.Process.Signal(syscall.SIGTERM)
		r.WaitLine(t, "stopped; the clusters run on")
		r.Cmd.Wait()
		kines := processes(filepath.Join(root, "clusters") + "/")
		// A new kine: another file at the same path, as an install puts it.
		replaceBinary(t, filepath.Join(bin, "kine"))
		polls := startPollers(t, root, names)
		polls.waitRounds(t, 3)
		r, kubectl, metricsURL = startServeWith(parent, exe, bin, root, ports, "--on-exit", "keep")
		eventually(t, time.Minute, "3 clusters adopted stale", func() (bool, string) {
			n := livetest.MetricValue(t, metricsURL, `socialweb_clusters_adopted_total{state="stale"}`)
			return n == 3, fmt.Sprint(n)
		})
		kine := filepath.Join(bin, "kine")
		restarted := func() (bool, string) {
			n := 0
			for _, c := range names {
				ids, _ := processrunner.FindByMarker(filepath.Join(root, "clusters", c)+"/", []string{kine})
				for _, id := range ids {
					if b, err := processrunner.RunningBinary(id.Pid); err == nil && !strings.HasSuffix(b.Path, "(deleted)") {
						n++
					}
				}
			}
			return n == len(names), fmt.Sprintf("%d of %d on the new kine", n, len(names))
		}
		eventually(t, 5*time.Minute, "every cluster on the new kine", restarted)
		for _, n := range names {
			eventually(t, 2*time.Minute, "Cluster "+n+" Ready", func() (bool, string) { p := phase(n); return p == "Ready", p })
		}
		polls.waitRounds(t, 3)
		down := polls.stop()
		if most := polls.mostDownAtOnce(); most > 1 {
			t.Errorf("%d tenants down at once during the upgrade, want at most 1 (--max-restarts-at-once 1): %v", most, down)
		}
		t.Logf("outages during the upgrade: %v; processes before %d", down, len(kines))
		for _, n := range names {
			if _, err := tenantOf(t, root, n).CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{}); err != nil {
				t.Errorf("cluster %s's ConfigMap after its restart: %v", n, err)
			}
		}
	})

	// The end: a serve that stops what it runs adopts everything (the front too), and the
	// teardown leaves nothing.
	r.Cmd.Process.Signal(syscall.SIGKILL)
	r.Cmd.Wait()
	r, kubectl, _ = startServe(t, exe, bin, root, ports)
	kubectl("delete", "-f", file, "--wait=true", "--timeout=180s")
	r.Cmd.Process.Signal(syscall.SIGINT)
	r.WaitLine(t, "stopped; nothing is running")
	r.Cmd.Wait()
	if left := processes(root + "/"); len(left) != 0 {
		t.Fatalf("left running: %v", left)
	}
}

// privateBinDir is a bin directory of links to bin's binaries, except those named in
// copies, which are copies: a test may replace them (an upgrade) without touching bin.
func privateBinDir(t *testing.T, bin string, copies ...string) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	ents, err := os.ReadDir(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		from, to := filepath.Join(bin, e.Name()), filepath.Join(dir, e.Name())
		if slices.Contains(copies, e.Name()) {
			copyExecutable(t, from, to)
			continue
		}
		if err := os.Symlink(from, to); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// replaceBinary puts a copy of path in its place: the same program, another file.
func replaceBinary(t *testing.T, path string) {
	t.Helper()
	copyExecutable(t, path, path+".new")
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// tenantOf is a client of cluster name from its tenant kubeconfig in its DataDir, read
// anew each time: a restart may have moved it to another port.
func tenantOf(t *testing.T, root, name string) kubernetes.Interface {
	t.Helper()
	c, err := tenantClient(root, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tenantClient(root, name string) (kubernetes.Interface, error) {
	raw, err := os.ReadFile(filepath.Join(clusterprovider.DataDirOf(root, name), "tenant.kubeconfig"))
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 2 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// pollers read each tenant's /readyz every 100 ms, as a tenant's client would, and keep
// every failure with its time.
type pollers struct {
	mu     sync.Mutex
	rounds int
	down   map[string][]time.Time // failed polls, by cluster
	done   chan struct{}
	wg     sync.WaitGroup
}

func startPollers(t *testing.T, root string, names []string) *pollers {
	p := &pollers{down: map[string][]time.Time{}, done: make(chan struct{})}
	for _, n := range names {
		p.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-p.done:
					return
				case <-time.After(100 * time.Millisecond):
				}
				ok := false
				if c, err := tenantClient(root, n); err == nil {
					var code int
					c.Discovery().RESTClient().Get().AbsPath("/readyz").Do(context.Background()).StatusCode(&code)
					ok = code == 200
				}
				p.mu.Lock()
				if !ok {
					p.down[n] = append(p.down[n], time.Now())
				}
				if n == names[0] {
					p.rounds++
				}
				p.mu.Unlock()
			}
		})
	}
	t.Cleanup(func() { p.stop() })
	return p
}

// waitRounds waits until n more rounds of polls have been made.
func (p *pollers) waitRounds(t *testing.T, n int) {
	p.mu.Lock()
	want := p.rounds + n
	p.mu.Unlock()
	eventually(t, time.Minute, fmt.Sprintf("%d rounds of polls", n), func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.rounds >= want, fmt.Sprint(p.rounds)
	})
}

// stop ends the polls and says, per cluster that failed any, how many and over how long.
func (p *pollers) stop() map[string]string {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]string{}
	for n, ts := range p.down {
		out[n] = fmt.Sprintf("%d failed polls over %.1fs", len(ts), ts[len(ts)-1].Sub(ts[0]).Seconds())
	}
	return out
}

// mostDownAtOnce is the most clusters whose outages (first to last failed poll) overlap.
func (p *pollers) mostDownAtOnce() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	type span struct{ from, to time.Time }
	var spans []span
	for _, ts := range p.down {
		spans = append(spans, span{ts[0], ts[len(ts)-1]})
	}
	most := 0
	for _, s := range spans {
		n := 0
		for _, o := range spans {
			if !o.from.After(s.from) && !o.to.Before(s.from) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}
