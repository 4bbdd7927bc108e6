// Command fleet measures many tenant control planes on one host, as an operator runs them:
// serve (from -bin-dir) with -clusters Clusters created on its front at once; each one's
// time from its creation to Ready (p50, p90, max) and the time until all are; then, with
// every cluster settled and idle, the PSS and CPU of each component per cluster, and how
// long each cluster takes to answer a tenant's "kubectl get ns". With -before DIR, the same
// runs first with the binaries in DIR (an older serve and its components), so the two sets
// are compared in one run on one machine.
//
//	go run ./bench/fleet -clusters 20
//	go run ./bench/fleet -clusters 20 -before /var/tmp/old-bin
package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/bench/measure"
	"socialweb.computer/kcp/internal/clusterprovider"
)

func main() {
	n := flag.Int("clusters", 20, "Clusters created at once")
	settle := flag.Duration("settle", 30*time.Second, "how long the clusters settle once all are Ready, before the readings")
	window := flag.Duration("for", time.Minute, "how long idle CPU is measured")
	bin := flag.String("bin-dir", "bin", "where the binaries measured are")
	before := flag.String("before", "", "a directory with an older set of the same binaries, measured first")
	maxBringUps := flag.Int("max-bring-ups", 0, "serve's --max-bring-ups (0: its default)")
	flag.Parse()
	if *n < 1 {
		measure.Check(fmt.Errorf("-clusters %d: want at least 1", *n))
	}
	fmt.Printf("fleet on %s (%d CPUs), %s: %d Clusters created at once through serve\n",
		measure.CPUModel(), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), *n)
	for _, dir := range []string{*before, *bin} {
		if dir == "" {
			continue
		}
		abs, err := filepath.Abs(dir)
		measure.Check(err)
		var flags []string
		if *maxBringUps > 0 {
			flags = append(flags, "--max-bring-ups", fmt.Sprint(*maxBringUps))
		}
		report(run(abs, *n, *settle, *window, flags))
	}
}

// result is one binary set's readings.
type result struct {
	bin          string
	toReady      []time.Duration // each cluster's, sorted
	allReady     time.Duration
	pss, cpu     map[string]float64 // per component, per cluster: MiB, share of a core
	getNS        []time.Duration    // each cluster's "kubectl get ns", sorted
	hostMemUsed  float64            // GiB, since before serve
	hostBusy     float64            // cores busy over the window, the whole host
	providerPSS  float64            // serve and its front, MiB
	providerCPU  float64            // share of a core
	clusterCount int
}

func run(binDir string, n int, settle, window time.Duration, serveFlags []string) result {
	r := result{bin: binDir, clusterCount: n, pss: map[string]float64{}, cpu: map[string]float64{}}
	root, remove := measure.DataRoot()
	defer remove()
	memBefore := measure.HostMemoryUsed()
	stop := measure.Serve(binDir, root, "32600-32767", serveFlags...)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	op := measure.OperatorOf(root)
	clusters, secrets := op.Clusters, op.Secrets

	names := make([]string, n)
	created := map[string]time.Time{}
	t0 := time.Now()
	for i := range names {
		names[i] = fmt.Sprintf("f%03d", i+1)
		_, err := clusters.Create(ctx, v1alpha1.Object("Cluster", names[i], map[string]any{"account": "bench"}), metav1.CreateOptions{})
		measure.Check(err)
		created[names[i]] = time.Now()
	}
	ready := map[string]time.Duration{}
	for len(ready) < n {
		measure.Check(ctx.Err())
		list, err := clusters.List(ctx, metav1.ListOptions{})
		measure.Check(err)
		now := time.Now()
		for _, u := range list.Items {
			if _, ok := ready[u.GetName()]; !ok && strings.HasPrefix(measure.PhaseReason(&u), v1alpha1.PhaseReady+" ") {
				ready[u.GetName()] = now.Sub(created[u.GetName()])
			}
		}
		time.Sleep(100 * time.Millisecond) // the resolution of the figures, not synchronisation
	}
	r.allReady = time.Since(t0)
	for _, d := range ready {
		r.toReady = append(r.toReady, d)
	}
	slices.Sort(r.toReady)

	time.Sleep(settle) // settling before a reading, not synchronisation
	var groups []group
	for _, name := range names {
		for _, g := range measure.MarkedGroups(clusterprovider.DataDirOf(root, name) + "/") {
			groups = append(groups, group{measure.GroupLeader(g), g})
		}
	}
	provider := measure.MarkedGroups(root)
	provider = slices.DeleteFunc(provider, func(g int) bool {
		return slices.ContainsFunc(groups, func(c group) bool { return c.pgid == g })
	})
	cpu0 := measure.CPUByGroup()
	busy0, all0 := measure.HostCPU()
	time.Sleep(window) // the window CPU is measured over
	cpu1 := measure.CPUByGroup()
	busy1, all1 := measure.HostCPU()
	for _, g := range groups {
		r.cpu[g.component] += (cpu1[g.pgid] - cpu0[g.pgid]) / window.Seconds() / float64(n)
		r.pss[g.component] += measure.GroupPSS(g.pgid) / float64(n)
	}
	for _, g := range provider {
		r.providerCPU += (cpu1[g] - cpu0[g]) / window.Seconds()
		r.providerPSS += measure.GroupPSS(g)
	}
	r.hostBusy = (busy1 - busy0) / (all1 - all0) * float64(runtime.NumCPU())
	r.hostMemUsed = measure.HostMemoryUsed() - memBefore

	// A tenant's "kubectl get ns": a fresh client from the delivered kubeconfig, one list.
	for _, name := range names {
		s, err := secrets.Get(ctx, name+"-kubeconfig", metav1.GetOptions{})
		measure.Check(err)
		cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["kubeconfig"])
		measure.Check(err)
		t := time.Now()
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		measure.Check(err)
		r.getNS = append(r.getNS, time.Since(t))
	}
	slices.Sort(r.getNS)
	return r
}

// group is one component's process group: its leader and what it started.
type group struct {
	component string
	pgid      int
}

func pct(d []time.Duration, p float64) float64 {
	return d[min(len(d)-1, int(float64(len(d))*p))].Seconds()
}

// report prints one binary set's readings as soon as they are had.
func report(r result) {
	fmt.Printf("\n%s, %d clusters:\n", r.bin, r.clusterCount)
	fmt.Printf("  create to Ready: p50 %.1fs, p90 %.1fs, max %.1fs; all Ready %.1fs after the first create\n",
		pct(r.toReady, 0.5), pct(r.toReady, 0.9), r.toReady[len(r.toReady)-1].Seconds(), r.allReady.Seconds())
	fmt.Printf("  tenant \"kubectl get ns\": p50 %.0f ms, max %.0f ms\n",
		pct(r.getNS, 0.5)*1000, r.getNS[len(r.getNS)-1].Seconds()*1000)
	fmt.Printf("  idle, per cluster:     %8s %10s\n", "PSS MiB", "% of a core")
	var comps []string
	for c := range r.pss {
		comps = append(comps, c)
	}
	slices.Sort(comps)
	var pss, cpu float64
	for _, c := range comps {
		fmt.Printf("    %-24s %8.1f %10.2f\n", c, r.pss[c], r.cpu[c]*100)
		pss += r.pss[c]
		cpu += r.cpu[c]
	}
	fmt.Printf("    %-24s %8.1f %10.2f\n", "whole cluster", pss, cpu*100)
	fmt.Printf("  serve and its front: %.0f MiB PSS, %.2f%% of a core; host: memory in use %+.2f GiB since before serve, %.2f cores busy\n",
		r.providerPSS, r.providerCPU*100, r.hostMemUsed, r.hostBusy)
}
