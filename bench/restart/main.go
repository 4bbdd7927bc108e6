// Command restart measures what a restart of the provider costs its tenants (issue 18):
// -clusters idle clusters through serve, each one's apiserver polled every -poll from its
// own tenant kubeconfig, as a tenant's client would; then, on the same data root and in
// one run, three restarts of serve, each a kill -9 and a start:
//
//  1. reap: the start with --adopt=false, as every start was before adoption: each group is
//     reaped and brought up again, at most --max-bring-ups at once;
//  2. adopt: the start as it is now: each group proven and adopted;
//  3. upgrade: kine's binary replaced before the start: each group adopted stale, then
//     restarted one at a time (--max-restarts-at-once 1).
//
// With -before DIR (a directory holding an older build of socialweb-clusterprovider), the
// clusters are first brought up by that serve, and a kill -9 and a start of it is measured
// first (round "before"): the provider as it was, in the same run.
//
// For each it prints the tenant-seconds of outage (failed polls times the interval), the
// longest outage, the most tenants down at once, and when the provider was back in
// control: its metrics served and every Cluster Ready on the front (for the upgrade, every
// cluster on the new kine too).
//
//	go run ./bench/restart -clusters 20
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/bench/measure"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/processrunner"
)

const ports = "32500-32599"

func main() {
	n := flag.Int("clusters", 20, "idle clusters")
	poll := flag.Duration("poll", 500*time.Millisecond, "how often each tenant's /readyz is read")
	bin := flag.String("bin-dir", "bin", "where the binaries are")
	before := flag.String("before", "", "a directory holding an older socialweb-clusterprovider: round \"before\" measures it first")
	flag.Parse()
	binDir, _ := filepath.Abs(*bin)
	root, remove := measure.DataRoot()
	defer remove()
	// A bin dir of links, kine a copy of its own: the upgrade replaces it.
	private := linkBin(binDir, "kine")
	defer os.RemoveAll(private)

	fmt.Printf("restart on %s (%d CPUs), %s: %d idle clusters, each apiserver polled every %s\n",
		measure.CPUModel(), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), *n, *poll)
	first := private
	rounds := []string{"reap", "adopt", "upgrade"}
	if *before != "" {
		// The same bin dir, but the older serve.
		old, _ := filepath.Abs(*before)
		first = linkBin(private, "")
		measure.Check(os.Remove(filepath.Join(first, "socialweb-clusterprovider")))
		measure.Check(os.Symlink(filepath.Join(old, "socialweb-clusterprovider"), filepath.Join(first, "socialweb-clusterprovider")))
		defer os.RemoveAll(first)
		rounds = append([]string{"before"}, rounds...)
	}
	serve := measure.StartServe(first, root, ports)
	clusters := measure.OperatorOf(root).Clusters
	ctx := context.Background()
	names := make([]string, *n)
	for i := range names {
		names[i] = fmt.Sprintf("r%02d", i+1)
		_, err := clusters.Create(ctx, v1alpha1.Object("Cluster", names[i], map[string]any{"account": "bench"}), metav1.CreateOptions{})
		measure.Check(err)
	}
	t0 := time.Now()
	allReady(clusters, len(names), 10*time.Minute)
	fmt.Printf("%d clusters Ready in %.1fs; idle 20 s\n", *n, time.Since(t0).Seconds())
	time.Sleep(20 * time.Second) // settle before the first restart: a bench's wait, not a test's sync

	p := startPolls(root, names, *poll)
	for _, round := range rounds {
		p.reset()
		time.Sleep(3 * time.Second) // a few clean polls before the crash
		serve.Kill()
		flags := []string{}
		if round == "reap" {
			flags = append(flags, "--adopt=false")
		}
		if round == "upgrade" {
			replace(filepath.Join(private, "kine"))
		}
		bins := private
		if round == "before" {
			bins = first
		}
		start := time.Now()
		serve = measure.StartServe(bins, root, ports, flags...)
		served := time.Since(start)
		// Back in control: this serve's own account of every cluster (a status on the front
		// still says Ready from before the crash), then every Cluster Ready.
		switch round {
		case "before", "reap":
			waitMetric(serve.MetricsURL, "socialweb_cluster_bringup_seconds_count", len(names), 15*time.Minute)
		case "adopt":
			waitMetric(serve.MetricsURL, `socialweb_clusters_adopted_total{state="current"}`, len(names), 5*time.Minute)
		case "upgrade":
			waitMetric(serve.MetricsURL, `socialweb_clusters_adopted_total{state="stale"}`, len(names), 5*time.Minute)
			waitMetric(serve.MetricsURL, "socialweb_cluster_bringup_seconds_count", len(names), 15*time.Minute)
			waitNewKine(root, private, names, 5*time.Minute)
		}
		allReady(clusters, len(names), 5*time.Minute)
		control := time.Since(start)
		time.Sleep(3 * time.Second) // polls after the last is back
		total, longest, most := p.outage()
		adopted := metric(serve.MetricsURL, "socialweb_clusters_adopted_total")
		fmt.Printf("%-8s tenant-seconds down %6.1f  longest %5.1fs  most down at once %2d  serving %.2fs  all Ready %.1fs  adopted %v\n",
			round, total, longest, most, served.Seconds(), control.Seconds(), adopted)
	}
	p.stop()
	// The end: every cluster deleted, serve stopped (stop: nothing left).
	measure.Check(clusters.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		list, err := clusters.List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	serve.Stop()
}

// allReady waits until n Clusters are Ready with reason Ready (not Adopting, not a stale
// status from before a restart: the reconcile writes it anew).
func allReady(clusters dynamic.ResourceInterface, n int, within time.Duration) {
	deadline := time.Now().Add(within)
	for {
		list, err := clusters.List(context.Background(), metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, u := range list.Items {
				if measure.PhaseReason(&u) == "Ready Ready" {
					ready++
				}
			}
		}
		if ready == n {
			return
		}
		if time.Now().After(deadline) {
			measure.Check(fmt.Errorf("%d of %d Clusters Ready after %s (%v)", ready, n, within, err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitMetric waits until series (a name, with its labels if it has any) reads at least n
// on the /metrics page at url.
func waitMetric(url, series string, n int, within time.Duration) {
	name, labels, _ := strings.Cut(series, "{")
	if labels != "" {
		labels = "{" + labels
	}
	deadline := time.Now().Add(within)
	for {
		v := 0.0
		for _, kv := range metric(url, name) {
			if value, ok := strings.CutPrefix(kv, labels+"="); ok {
				v, _ = strconv.ParseFloat(value, 64)
			}
		}
		if v >= float64(n) {
			return
		}
		if time.Now().After(deadline) {
			measure.Check(fmt.Errorf("%s is %v after %s, want %d", series, v, within, n))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitNewKine waits until every cluster's kine runs the binary now at bin/kine.
func waitNewKine(root, bin string, names []string, within time.Duration) {
	kine := filepath.Join(bin, "kine")
	deadline := time.Now().Add(within)
	for {
		fresh := 0
		for _, c := range names {
			ids, _ := processrunner.FindByMarker(clusterprovider.DataDirOf(root, c)+"/", []string{kine})
			for _, id := range ids {
				if b, err := processrunner.RunningBinary(id.Pid); err == nil && !strings.HasSuffix(b.Path, "(deleted)") {
					fresh++
				}
			}
		}
		if fresh == len(names) {
			return
		}
		if time.Now().After(deadline) {
			measure.Check(fmt.Errorf("%d of %d clusters on the new kine after %s", fresh, len(names), within))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// polls reads every tenant's /readyz each interval and keeps, per round, the failed polls.
type polls struct {
	every time.Duration
	mu    sync.Mutex
	fails map[string][]time.Time
	done  chan struct{}
	wg    sync.WaitGroup
}

func startPolls(root string, names []string, every time.Duration) *polls {
	p := &polls{every: every, fails: map[string][]time.Time{}, done: make(chan struct{})}
	for _, name := range names {
		p.wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-p.done:
					return
				case <-t.C:
				}
				if !answers(root, name, every) {
					p.mu.Lock()
					p.fails[name] = append(p.fails[name], time.Now())
					p.mu.Unlock()
				}
			}
		})
	}
	return p
}

// answers reads the tenant's /readyz through its own kubeconfig, read anew each time (a
// restart may move it to another port).
func answers(root, name string, timeout time.Duration) bool {
	raw, err := os.ReadFile(filepath.Join(clusterprovider.DataDirOf(root, name), "tenant.kubeconfig"))
	if err != nil {
		return false
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return false
	}
	cfg.Timeout = max(timeout, time.Second)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false
	}
	var code int
	c.Discovery().RESTClient().Get().AbsPath("/readyz").Do(context.Background()).StatusCode(&code)
	return code == 200
}

func (p *polls) reset() {
	p.mu.Lock()
	p.fails = map[string][]time.Time{}
	p.mu.Unlock()
}

func (p *polls) stop() { close(p.done); p.wg.Wait() }

// outage is the round's tenant-seconds down (failed polls times the interval), the longest
// single tenant's, and the most tenants failing within one interval.
func (p *polls) outage() (total, longest float64, most int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	buckets := map[int64]map[string]bool{}
	for name, ts := range p.fails {
		d := float64(len(ts)) * p.every.Seconds()
		total += d
		longest = max(longest, d)
		for _, t := range ts {
			b := t.UnixNano() / int64(p.every)
			if buckets[b] == nil {
				buckets[b] = map[string]bool{}
			}
			buckets[b][name] = true
		}
	}
	for _, m := range buckets {
		most = max(most, len(m))
	}
	return total, longest, most
}

// metric is every series of name on a /metrics page, as "labels=value".
func metric(url, name string) []string {
	res, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer res.Body.Close()
	var out []string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			labels, value, _ := strings.Cut(rest, " ")
			if v, err := strconv.ParseFloat(value, 64); err == nil && v > 0 {
				out = append(out, labels+"="+value)
			}
		}
	}
	slices.Sort(out)
	return out
}

// linkBin is a bin dir of links to bin's files, except the one named copy, a copy.
func linkBin(bin, copy string) string {
	dir, err := os.MkdirTemp("", "socialweb-bench-bin-")
	measure.Check(err)
	measure.Check(os.Chmod(dir, 0o755))
	ents, err := os.ReadDir(bin)
	measure.Check(err)
	for _, e := range ents {
		if e.Name() == copy {
			copyFile(filepath.Join(bin, e.Name()), filepath.Join(dir, e.Name()))
			continue
		}
		measure.Check(os.Symlink(filepath.Join(bin, e.Name()), filepath.Join(dir, e.Name())))
	}
	return dir
}

func copyFile(from, to string) {
	in, err := os.Open(from)
	measure.Check(err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	measure.Check(err)
	_, err = io.Copy(out, in)
	measure.Check(err)
	measure.Check(out.Close())
}

// replace puts a copy of path in its place, as an install does: another file.
func replace(path string) {
	copyFile(path, path+".new")
	measure.Check(os.Rename(path+".new", path))
}
