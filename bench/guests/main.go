// Command guests measures real guests: add to Node Ready and initialized by the CCM (median
// of -guests adds), pod create to Running with a local image (median of -pods), a guest's
// idle PSS by component (its init, containerd, the kubelet, kube-proxy), and, with
// -clusters N, how many real guests fit beside N idle clusters on this host: guests are
// added round-robin until -max-guests, an add fails, or the host has less than -reserve
// of memory available.
//
//	go run ./bench/guests -guests 5 -pods 5 -clusters 10 -max-guests 40
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/bench/measure"
	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/guestimage"
	"socialweb.computer/kcp/internal/nodeprovider"
	"socialweb.computer/kcp/internal/portallocator"
)

func main() {
	guests := flag.Int("guests", 5, "real guests added one after another to the first cluster")
	pods := flag.Int("pods", 5, "pods created one after another on them")
	clusters := flag.Int("clusters", 0, "with more than 0: bring up this many clusters and add guests beside them until the host is full")
	maxGuests := flag.Int("max-guests", 40, "stop the fill at this many guests")
	reserve := flag.Float64("reserve", 2, "stop the fill when the host has less than this many GiB available")
	bin := flag.String("bin-dir", "bin", "where the binaries are")
	flag.Parse()
	binDir, _ := filepath.Abs(*bin)
	root, remove := measure.DataRoot()
	defer remove()
	h, err := cgroups.Detect(cgroups.Mount, clusterprovider.CgroupSubtree(root))
	measure.Check(err)
	p, err := clusterprovider.New(clusterprovider.Config{DataRoot: root, BinDir: binDir, Cgroups: h, Ports: portallocator.Range{First: 32000, Last: 32999}})
	measure.Check(err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	c, err := p.Up(ctx, "benchguests")
	measure.Check(err)
	defer c.Destroy()
	fmt.Printf("machine: %s\n", measure.CPUModel())

	var adds []float64
	for i := 1; i <= *guests; i++ {
		t0 := time.Now()
		_, err := c.AddNodeOf(ctx, fmt.Sprintf("n%d", i), nodeprovider.KindReal)
		measure.Check(err)
		adds = append(adds, time.Since(t0).Seconds())
	}
	fmt.Printf("add real guest to Node Ready and initialized: median %.2fs over %d adds (min %.2f, max %.2f)\n", measure.Median(adds), len(adds), minOf(adds), maxOf(adds))

	cfg, err := clientcmd.BuildConfigFromFlags("", c.TenantKubeconfig)
	measure.Check(err)
	cs := kubernetes.NewForConfigOrDie(cfg)
	var starts []float64
	for i := 0; i < *pods; i++ {
		t0 := time.Now()
		name := fmt.Sprintf("p%d", i)
		_, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: guestimage.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"}}}},
		}, metav1.CreateOptions{})
		measure.Check(err)
		for {
			pod, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			measure.Check(err)
			if pod.Status.Phase == corev1.PodRunning {
				break
			}
			time.Sleep(20 * time.Millisecond) // a benchmark's sampling interval, not a synchronisation
		}
		starts = append(starts, time.Since(t0).Seconds())
	}
	fmt.Printf("pod create to Running (local image): median %.2fs over %d pods (min %.2f, max %.2f)\n", measure.Median(starts), len(starts), minOf(starts), maxOf(starts))
	for i := 0; i < *pods; i++ {
		cs.CoreV1().Pods("default").Delete(ctx, fmt.Sprintf("p%d", i), metav1.DeleteOptions{})
	}

	// Idle: 30 s after the pods' deletion, the first guest's processes by component.
	time.Sleep(30 * time.Second)
	byName := guestPSS(c.DataDir, "n1")
	var names []string
	total := 0.0
	for n, v := range byName {
		names = append(names, n)
		total += v
	}
	sort.Strings(names)
	fmt.Printf("idle guest PSS: %.1f MiB:", total)
	for _, n := range names {
		fmt.Printf(" %s %.1f", n, byName[n])
	}
	fmt.Println()

	if *clusters > 0 {
		fill(ctx, p, *clusters, *maxGuests, *reserve)
	}
}

// fill brings up n clusters, then adds real guests to them in turn until max, a failed
// add, or less than reserve GiB available.
func fill(ctx context.Context, p *clusterprovider.Provider, n, max int, reserve float64) {
	var cs []*clusterprovider.Cluster
	for i := 0; i < n; i++ {
		c, err := p.Up(ctx, fmt.Sprintf("fill%d", i))
		measure.Check(err)
		defer c.Destroy()
		cs = append(cs, c)
	}
	fmt.Printf("%d idle clusters up; host memory used %.1f GiB\n", n, measure.HostMemoryUsed())
	added := 0
	for added < max {
		if avail := availableGiB(); avail < reserve {
			fmt.Printf("stopped: %.1f GiB available, under the %.1f GiB reserve\n", avail, reserve)
			break
		}
		c := cs[added%len(cs)]
		t0 := time.Now()
		actx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		_, err := c.AddNodeOf(actx, fmt.Sprintf("g%d", added/len(cs)), nodeprovider.KindReal)
		cancel()
		if err != nil {
			fmt.Printf("stopped: add %d failed: %v\n", added+1, err)
			logs, _ := filepath.Glob(filepath.Join(c.DataDir, "logs", "guest.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				fmt.Printf("--- %s\n%s\n", l, b)
			}
			break
		}
		added++
		if added%5 == 0 {
			fmt.Printf("%d real guests beside %d clusters: host memory used %.1f GiB, last add %.2fs\n", added, n, measure.HostMemoryUsed(), time.Since(t0).Seconds())
		}
	}
	fmt.Printf("fill: %d real guests Ready beside %d idle clusters; host memory used %.1f GiB, %.1f GiB available\n", added, n, measure.HostMemoryUsed(), availableGiB())
}

func availableGiB() float64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024 / 1024
		}
	}
	return 0
}

// guestPSS is the PSS (MiB) of every process in guest nodeID's PID namespace, by command
// name: its init's namespace, read from its pid's /proc entry.
func guestPSS(dataDir, nodeID string) map[string]float64 {
	out := map[string]float64{}
	init := findInit(dataDir, nodeID)
	if init == 0 {
		return out
	}
	ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if x, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); x != ns {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		out[strings.TrimSpace(string(comm))] += measure.PSS(pid)
	}
	return out
}

// findInit is the pid of the process running socialweb-guest for nodeID's directory.
func findInit(dataDir, nodeID string) int {
	want := nodeprovider.Dir(dataDir, nodeID)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(b), "socialweb-guest") && strings.Contains(string(b), want+"/") {
			return pid
		}
	}
	return 0
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
