// Command density measures what many declared clusters cost when few are used: serve
// with a front door (from bin/), -declared Clusters created asleep (spec.createAsleep, a
// long sleepAfter), of which the first -awake are woken by a request through the front
// door. It prints how long declaring them took, the disk a cluster created asleep holds,
// the wakes, and then, with every awake cluster settled, the memory (PSS) and CPU of the
// provider and everything it runs, and of this host as a whole, over -for.
//
//	go run ./bench/density -declared 200 -awake 20
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/bench/measure"
	"socialweb.computer/kcp/internal/clusterprovider"
)

const domain = "kcp.bench"

func main() {
	declared := flag.Int("declared", 200, "Clusters declared, created asleep")
	awake := flag.Int("awake", 20, "of them, woken by a request")
	settle := flag.Duration("settle", 30*time.Second, "how long the awake clusters settle before the reading")
	window := flag.Duration("for", time.Minute, "how long CPU is measured")
	bin := flag.String("bin-dir", "bin", "where the binaries are")
	flag.Parse()
	if *awake < 1 || *awake > *declared {
		measure.Check(fmt.Errorf("-awake %d: want 1 to -declared (%d)", *awake, *declared))
	}
	binDir, _ := filepath.Abs(*bin)
	root, remove := measure.DataRoot()
	defer remove()
	memBefore := measure.HostMemoryUsed()

	door := measure.FreeAddr()
	stop := measure.Serve(binDir, root, "32400-32499", "--front-door", door, "--base-domain", domain)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	op := measure.OperatorOf(root)
	clusters, secrets := op.Clusters, op.Secrets

	fmt.Printf("density on %s (%d CPUs), %s: %d Clusters declared asleep, %d of them woken\n",
		measure.CPUModel(), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), *declared, *awake)
	names := make([]string, *declared)
	t0 := time.Now()
	for i := range names {
		names[i] = fmt.Sprintf("d%03d", i+1)
		_, err := clusters.Create(ctx, v1alpha1.Object("Cluster", names[i], map[string]any{"account": "bench", "sleepAfter": "10h", "createAsleep": true}), metav1.CreateOptions{})
		measure.Check(err)
	}
	// Declared: Sleeping (CreatedAsleep), its kubeconfig delivered.
	kubeconfigs := map[string][]byte{}
	for len(kubeconfigs) < len(names) {
		measure.Check(ctx.Err())
		list, err := clusters.List(ctx, metav1.ListOptions{})
		measure.Check(err)
		for _, u := range list.Items {
			if _, ok := kubeconfigs[u.GetName()]; ok || measure.PhaseReason(&u) != "Sleeping CreatedAsleep" {
				continue
			}
			if s, err := secrets.Get(ctx, u.GetName()+"-kubeconfig", metav1.GetOptions{}); err == nil {
				kubeconfigs[u.GetName()] = s.Data["kubeconfig"]
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("declared to asleep with its kubeconfig delivered, all %d: %.1fs (%.0f ms each)\n", *declared, time.Since(t0).Seconds(), float64(time.Since(t0).Milliseconds())/float64(*declared))
	fmt.Printf("disk of a cluster created asleep: %.0f KiB (%s)\n", float64(du(clusterprovider.DataDirOf(root, names[0])))/1024, names[0])
	fmt.Printf("with %d asleep and none awake: host memory in use %+.2f GiB since before serve; provider and front %.0f MiB PSS\n",
		*declared, measure.HostMemoryUsed()-memBefore, pss(root))

	// Woken all at once, each by one GET through the front door (retried when a hold ends,
	// as client-go does); the provider brings them up two at a time.
	t1 := time.Now()
	wakes := make([]time.Duration, *awake)
	var wg sync.WaitGroup
	for i, name := range names[:*awake] {
		wg.Go(func() {
			cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfigs[name])
			measure.Check(err)
			tlsConfig, err := rest.TLSConfigFor(cfg)
			measure.Check(err)
			c := &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true,
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, "tcp", door)
				}}}
			for ctx.Err() == nil {
				resp, err := c.Get("https://" + name + "." + domain + "/version")
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						wakes[i] = time.Since(t1)
						return
					}
				}
			}
			measure.Check(fmt.Errorf("%s never woke", name))
		})
	}
	wg.Wait()
	slices.Sort(wakes)
	fmt.Printf("%d woken at once: first answered %.1fs, median %.1fs, last %.1fs after the requests\n", *awake, wakes[0].Seconds(), wakes[len(wakes)/2].Seconds(), wakes[len(wakes)-1].Seconds())

	time.Sleep(*settle) // settling before a reading, not synchronisation
	groups := measure.MarkedGroups(root)
	cpu := func() float64 {
		total := 0.0
		for _, g := range groups {
			total += measure.GroupCPU(g)
		}
		return total
	}
	ours0 := cpu()
	busy0, all0 := measure.HostCPU()
	time.Sleep(*window) // the window CPU is measured over
	ours1 := cpu()
	busy1, all1 := measure.HostCPU()
	cores := float64(runtime.NumCPU())
	fmt.Printf("%d declared, %d awake and idle: provider, front and every cluster %.2f GiB PSS (%.0f MiB per awake cluster, the rest the provider and front); host memory in use %+.2f GiB since before serve\n",
		*declared, *awake, pss(root)/1024, awakePSS(root, names[:*awake])/float64(*awake), measure.HostMemoryUsed()-memBefore)
	fmt.Printf("CPU over %s: ours %.2f cores; this host %.2f of %.0f cores busy\n", *window, (ours1-ours0)/window.Seconds(), (busy1-busy0)/(all1-all0)*cores, cores)
}

// pss is the PSS (MiB) of every process group that names the data root, serve's included.
func pss(root string) float64 {
	total := 0.0
	for _, g := range measure.MarkedGroups(root) {
		total += measure.GroupPSS(g)
	}
	return total
}

// awakePSS is the PSS (MiB) of the named clusters' processes.
func awakePSS(root string, names []string) float64 {
	total := 0.0
	for _, n := range names {
		total += pss(clusterprovider.DataDirOf(root, n) + "/")
	}
	return total
}

// du is the bytes the files under dir hold.
func du(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
