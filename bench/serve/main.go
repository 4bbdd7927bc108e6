// Command serve measures the provider as a service, in process: its own front's bring-up
// and PSS; -clusters Clusters created on the front at once, each one's time to Ready and
// the time until all are (bring-ups at most -max-bring-ups at once); a Node object per
// cluster to Ready; each cluster's idle PSS (every process of its group and node group),
// the front's and the provider's own; and the deletion of them all until every one is gone.
//
//	go run ./bench/serve -clusters 4
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/bench/measure"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/processrunner"
)

func main() {
	n := flag.Int("clusters", 4, "Clusters created at once")
	maxBringUps := flag.Int("max-bring-ups", 2, "bring-ups at once")
	idle := flag.Duration("idle", 15*time.Second, "how long the clusters settle before their PSS is read")
	bin := flag.String("bin-dir", "bin", "where the binaries are")
	flag.Parse()
	binDir, _ := filepath.Abs(*bin)
	root, remove := measure.DataRoot()
	defer remove()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	loop := &clusterprovider.Loop{Instance: "bench", MaxBringUps: *maxBringUps, Log: slog.New(slog.DiscardHandler)}
	p, err := clusterprovider.New(clusterprovider.Config{DataRoot: root, BinDir: binDir, Ports: portallocator.Range{First: 32000, Last: 32999}, OnEvent: loop.StepEvent})
	measure.Check(err)
	loop.P = p
	t0 := time.Now()
	front, err := p.UpFront(ctx)
	measure.Check(err)
	defer front.Stop()
	frontUp := time.Since(t0)
	cfg, err := clientcmd.BuildConfigFromFlags("", front.TenantKubeconfig)
	measure.Check(err)
	cfg.QPS, cfg.Burst = 100, 200
	measure.Check(v1alpha1.InstallCRDs(ctx, apiextensions.NewForConfigOrDie(cfg)))
	dyn := dynamic.NewForConfigOrDie(cfg)
	loop.Front, loop.Core = dyn, kubernetes.NewForConfigOrDie(cfg)
	loopCtx, stopLoop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(loopCtx) }()

	clusters := dyn.Resource(clusterprovider.ClustersResource).Namespace("default")
	nodes := dyn.Resource(clusterprovider.NodesResource).Namespace("default")
	names := make([]string, *n)
	t0 = time.Now()
	for i := range names {
		names[i] = fmt.Sprintf("bench%d", i+1)
		_, err := clusters.Create(ctx, v1alpha1.Object("Cluster", names[i], map[string]any{"account": "bench"}), metav1.CreateOptions{})
		measure.Check(err)
	}
	readyAt := waitAll(ctx, t0, names, func(name string) bool {
		u, err := clusters.Get(ctx, name, metav1.GetOptions{})
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		return err == nil && phase == v1alpha1.PhaseReady
	})
	t1 := time.Now()
	for _, name := range names {
		_, err := nodes.Create(ctx, v1alpha1.Object("Node", name+"-n1", map[string]any{"cluster": name, "nodeID": "n1"}), metav1.CreateOptions{})
		measure.Check(err)
	}
	nodesAt := waitAll(ctx, t1, names, func(name string) bool {
		u, err := nodes.Get(ctx, name+"-n1", metav1.GetOptions{})
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		return err == nil && phase == v1alpha1.NodePhaseReady
	})
	time.Sleep(*idle) // settling before a reading, not synchronisation

	fmt.Printf("machine: %s; %d Clusters created at once on the provider's own front, --max-bring-ups %d\n", measure.CPUModel(), *n, *maxBringUps)
	fmt.Printf("front Ready in %.2fs, idle PSS %.0f MiB; the provider itself %.0f MiB PSS\n", frontUp.Seconds(), groupPSS(front.DataDir, p.RequiredBinaries()), measure.PSS(os.Getpid()))
	fmt.Printf("%-10s %-22s %-26s %s\n", "cluster", "created to Ready (s)", "Node object to Ready (s)", "idle PSS, with 1 node (MiB)")
	for i, name := range names {
		fmt.Printf("%-10s %-22.2f %-26.2f %.0f\n", name, readyAt[i].Seconds(), nodesAt[i].Seconds(), groupPSS(p.DataDir(name), p.RequiredBinaries()))
	}
	fmt.Printf("all %d Ready %.2fs after creation; median %.2fs\n", *n, slices.Max(readyAt).Seconds(), measure.Median(seconds(readyAt)))

	t2 := time.Now()
	for _, name := range names {
		measure.Check(clusters.Delete(ctx, name, metav1.DeleteOptions{}))
	}
	goneAt := waitAll(ctx, t2, names, func(name string) bool {
		_, err := clusters.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	fmt.Printf("all %d deleted to gone (nodes, processes, leases, DataDirs, Secrets) in %.2fs\n", *n, slices.Max(goneAt).Seconds())
	stopLoop()
	measure.Check(<-done)
}

// waitAll polls until done holds for every name and returns when each first did.
func waitAll(ctx context.Context, t0 time.Time, names []string, done func(string) bool) []time.Duration {
	at := make([]time.Duration, len(names))
	for left := len(names); left > 0; {
		measure.Check(ctx.Err())
		for i, name := range names {
			if at[i] == 0 && done(name) {
				at[i], left = time.Since(t0), left-1
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return at
}

// groupPSS sums the PSS of every process of a DataDir (each a process group of its own).
func groupPSS(dataDir string, programs []string) float64 {
	ids, err := processrunner.FindByMarker(dataDir+"/", programs)
	measure.Check(err)
	total := 0.0
	for _, id := range ids {
		total += measure.GroupPSS(id.Pid)
	}
	return total
}

func seconds(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = v.Seconds()
	}
	return out
}
