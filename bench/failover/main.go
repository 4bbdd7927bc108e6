// Command failover measures how long a cluster on the external datastore takes to come
// back on another instance when its instance's host is lost (issue 15): a PostgreSQL server
// over TLS, a serve that runs only the front (capacity 0), and two instances, host-a and
// host-b, that reach the server. -clusters Clusters with spec.datastore external are spread
// over both; then host-a's serve and every process of it are killed with SIGKILL, as a lost
// host, and each of its clusters is timed until it is Ready on host-b: from the loss, and
// from the moment host-a's Lease expired (its last renewal plus the Lease's 30 s), which is
// the part the design can shorten (a shorter Lease, at more writes to the front).
//
//	go run ./bench/failover -clusters 6
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/bench/measure"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/instancelease"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

// Ports: the front's, host-a's and host-b's apiservers (bench/ holds 32000-32999; a
// benchmark runs alone).
const frontPorts, portsA, portsB = "32200-32209", "32210-32249", "32250-32289"

func main() {
	n := flag.Int("clusters", 6, "clusters with spec.datastore external, spread over the two instances")
	bin := flag.String("bin-dir", "bin", "where the binaries are")
	flag.Parse()
	binDir, _ := filepath.Abs(*bin)
	root, remove := measure.DataRoot()
	defer remove()
	pg, err := livetest.StartExternalPostgres(root, clusterstack.DefaultPostgresBin)
	measure.Check(err)
	defer pg.Stop()
	fmt.Printf("failover on %s (%d CPUs), %s: %d clusters on an external PostgreSQL over TLS, two instances\n",
		measure.CPUModel(), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), *n)

	rootF, rootA, rootB := filepath.Join(root, "front"), filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{rootF, rootA, rootB} {
		measure.Check(os.MkdirAll(d, 0o711))
	}
	stopF := measure.Serve(binDir, rootF, frontPorts, "--instance", "front", "--capacity", "clusters=0")
	defer stopF()
	front := filepath.Join(rootF, "operator.kubeconfig")
	a := measure.StartServe(binDir, rootA, portsA, "--front-kubeconfig", front, "--instance", "host-a", "--external-datastore", pg.File)
	b := measure.StartServe(binDir, rootB, portsB, "--front-kubeconfig", front, "--instance", "host-b", "--external-datastore", pg.File)
	defer b.Stop()
	op := measure.OperatorOf(rootF)
	cfg, err := clientcmd.BuildConfigFromFlags("", front)
	measure.Check(err)
	core := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	names := make([]string, *n)
	for i := range names {
		names[i] = fmt.Sprintf("f%02d", i+1)
		_, err := op.Clusters.Create(ctx, v1alpha1.Object("Cluster", names[i], map[string]any{"account": "acme", "datastore": v1alpha1.DatastoreExternal}), metav1.CreateOptions{})
		measure.Check(err)
	}
	on, _ := waitReady(ctx, op.Clusters, names, "", 8*time.Minute)
	var onA []string
	for _, name := range names {
		if on[name] == "host-a" {
			onA = append(onA, name)
		}
	}
	fmt.Printf("all %d Ready: %d on host-a, %d on host-b\n", *n, len(onA), *n-len(onA))
	// Each identity must be on the front before the loss, or another instance could not
	// bring the cluster up as itself.
	deadline := time.Now().Add(time.Minute)
	for _, name := range onA {
		for {
			if _, err := core.CoreV1().Secrets("default").Get(ctx, name+"-identity", metav1.GetOptions{}); err == nil {
				break
			}
			if time.Now().After(deadline) {
				measure.Check(fmt.Errorf("cluster %s: no identity Secret on the front", name))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// host-a is lost: its serve and every process of it, at once.
	a.Kill()
	serveBin := filepath.Join(binDir, "socialweb-clusterprovider")
	victims, _ := processrunner.FindByMarker(rootA+"/", append(livetest.StackPrograms(binDir), serveBin))
	for _, id := range victims {
		syscall.Kill(id.Pid, syscall.SIGKILL)
	}
	lost := time.Now()
	lease, err := core.CoordinationV1().Leases(instancelease.Namespace).Get(ctx, "host-a", metav1.GetOptions{})
	measure.Check(err)
	expired := lease.Spec.RenewTime.Add(instancelease.Duration)
	fmt.Printf("host-a lost (%d processes killed); its lease expires %.1fs later\n", len(victims), expired.Sub(lost).Seconds())
	_, ready := waitReady(ctx, op.Clusters, onA, "host-b", 5*time.Minute)
	var fromLoss, fromExpiry []float64
	for _, name := range onA {
		fromLoss = append(fromLoss, ready[name].Sub(lost).Seconds())
		fromExpiry = append(fromExpiry, ready[name].Sub(expired).Seconds())
	}
	slices.Sort(fromLoss)
	slices.Sort(fromExpiry)
	fmt.Printf("| clusters failed over | from the loss to Ready, p50 / max | from the lease's expiry to Ready, p50 / max |\n|---|---|---|\n")
	fmt.Printf("| %d | %.1f s / %.1f s | %.1f s / %.1f s |\n", len(onA), measure.Median(fromLoss), fromLoss[len(fromLoss)-1], measure.Median(fromExpiry), fromExpiry[len(fromExpiry)-1])

	for _, name := range names {
		measure.Check(op.Clusters.Delete(ctx, name, metav1.DeleteOptions{}))
	}
	for {
		list, err := op.Clusters.List(ctx, metav1.ListOptions{})
		measure.Check(err)
		if len(list.Items) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// getter is the Clusters of the front's default namespace, as the benchmark reads them.
type getter interface {
	Get(context.Context, string, metav1.GetOptions, ...string) (*unstructured.Unstructured, error)
}

// readyOn is the instance the Cluster name is Ready on, bound there; "" while it is not.
func readyOn(ctx context.Context, clusters getter, name string) string {
	u, err := clusters.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	at, _, _ := unstructured.NestedString(u.Object, "status", "instance")
	if phase != v1alpha1.PhaseReady || at == "" || u.GetLabels()[v1alpha1.InstanceLabel] != at {
		return ""
	}
	return at
}

// waitReady waits until every named Cluster is Ready (on instance, when given), looking
// every 100 ms, and returns the instance each runs on and when it was first seen so.
func waitReady(ctx context.Context, clusters getter, names []string, instance string, within time.Duration) (map[string]string, map[string]time.Time) {
	on, at := map[string]string{}, map[string]time.Time{}
	deadline := time.Now().Add(within)
	for len(on) < len(names) {
		for _, name := range names {
			if on[name] != "" {
				continue
			}
			if got := readyOn(ctx, clusters, name); got != "" && (instance == "" || got == instance) {
				on[name], at[name] = got, time.Now()
			}
		}
		if time.Now().After(deadline) {
			measure.Check(fmt.Errorf("not Ready within %s: %d of %s", within, len(on), strings.Join(names, ",")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return on, at
}
