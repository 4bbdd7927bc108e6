// Command frontdoor measures the front door as an operator runs it (serve with
// --front-door, from bin/): the latency it adds to a request against going to the
// apiserver's own port, on a kept-alive connection and on a new one each time (p50, p99);
// new connections per second through it and direct; and a sleeping cluster's wake, from
// the first byte a client sends to the first response (median of -wakes).
//
//	go run ./bench/frontdoor -requests 500 -wakes 5
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/bench/measure"
	"socialweb.computer/kcp/internal/portallocator"
)

const (
	domain  = "kcp.bench"
	cluster = "fd"
)

func main() {
	requests := flag.Int("requests", 500, "requests per latency series")
	wakes := flag.Int("wakes", 5, "wakes to time")
	rate := flag.Duration("rate-for", 5*time.Second, "how long new connections are opened as fast as they go")
	bin := flag.String("bin-dir", "bin", "where the binaries are")
	flag.Parse()
	binDir, _ := filepath.Abs(*bin)
	root, remove := measure.DataRoot()
	defer remove()

	door := measure.FreeAddr()
	stop := measure.Serve(binDir, root, "32100-32199", "--front-door", door, "--base-domain", domain)
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	op, err := clientcmd.BuildConfigFromFlags("", filepath.Join(root, "operator.kubeconfig"))
	measure.Check(err)
	dyn := dynamic.NewForConfigOrDie(op)
	clusters := dyn.Resource(schema.GroupVersionResource{Group: "socialweb.computer", Version: "v1alpha1", Resource: "clusters"}).Namespace("default")
	_, err = clusters.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "socialweb.computer/v1alpha1", "kind": "Cluster",
		"metadata": map[string]any{"name": cluster},
		"spec":     map[string]any{"account": "bench", "sleepAfter": "3s"},
	}}, metav1.CreateOptions{})
	measure.Check(err)
	phase := func() string {
		u, err := clusters.Get(ctx, cluster, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return measure.PhaseReason(u)
	}
	waitPhase := func(want string) {
		for !strings.HasPrefix(phase(), want) {
			if ctx.Err() != nil {
				measure.Check(fmt.Errorf("cluster %s never %s", cluster, want))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitPhase("Ready ")
	secret, err := kubernetes.NewForConfigOrDie(op).CoreV1().Secrets("default").Get(ctx, cluster+"-kubeconfig", metav1.GetOptions{})
	measure.Check(err)
	tenant, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["kubeconfig"])
	measure.Check(err)
	tlsConfig, err := rest.TLSConfigFor(tenant)
	measure.Check(err)
	tlsConfig.ServerName = cluster + "." + domain
	direct := "127.0.0.1:" + fmt.Sprint(apiserverPort(root))

	fmt.Printf("front door benchmark on %s (%d CPUs), %s\n", measure.CPUModel(), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
	// Requests keep the cluster awake (each is a byte through the door, or a busy
	// connection); between series it may fall asleep after 3 s, and is woken again.
	for _, keep := range []bool{true, false} {
		kind := "new connection each"
		if keep {
			kind = "kept-alive connection"
		}
		d := latencies(tlsConfig, direct, *requests, keep)
		f := latencies(tlsConfig, door, *requests, keep)
		fmt.Printf("GET /version, %s, %d requests: direct p50 %s p99 %s; front door p50 %s p99 %s (adds %s at p50)\n",
			kind, *requests, pct(d, 50), pct(d, 99), pct(f, 50), pct(f, 99), pct(f, 50)-pct(d, 50))
	}
	for _, to := range []struct{ name, addr string }{{"direct", direct}, {"front door", door}} {
		fmt.Printf("new connections (TLS handshake and GET /version), 2 at once for %s, %s: %.0f/s\n", *rate, to.name, connectionRate(tlsConfig, to.addr, *rate))
	}

	var times []float64
	for range *wakes {
		waitPhase("Sleeping Sleeping")
		// As client-go does: a GET that meets EOF (a hold that ended) is sent again.
		t0 := time.Now()
		for {
			_, err := get(client(tlsConfig, door, false, time.Minute))
			if err == nil {
				break
			}
			if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "EOF") {
				measure.Check(fmt.Errorf("wake: %w", err))
			}
		}
		times = append(times, time.Since(t0).Seconds())
	}
	slices.Sort(times)
	fmt.Printf("wake, first byte to first response, %d wakes: median %.1fs (min %.1fs, max %.1fs)\n", len(times), measure.Median(times), times[0], times[len(times)-1])
}

// client dials addr whatever the URL says, as a kubeconfig with the front door's name
// would resolve to it.
func client(cfg *tls.Config, addr string, keepAlive bool, handshake time.Duration) *http.Client {
	return &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		TLSClientConfig: cfg.Clone(), TLSHandshakeTimeout: handshake, DisableKeepAlives: !keepAlive,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		},
	}}
}

func get(c *http.Client) (time.Duration, error) {
	t0 := time.Now()
	resp, err := c.Get("https://" + cluster + "." + domain + "/version")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /version: %s", resp.Status)
	}
	return time.Since(t0), nil
}

// latencies times n sequential GETs to addr; the first (a possible wake) is not counted.
func latencies(cfg *tls.Config, addr string, n int, keepAlive bool) []time.Duration {
	c := client(cfg, addr, keepAlive, time.Minute)
	var out []time.Duration
	for i := -1; i < n; i++ {
		d, err := get(c)
		if err != nil && i == -1 {
			i-- // the cluster was asleep: the hold ended; again
			continue
		}
		measure.Check(err)
		if i >= 0 {
			out = append(out, d)
		}
	}
	c.CloseIdleConnections()
	slices.Sort(out)
	return out
}

func pct(sorted []time.Duration, p int) time.Duration {
	return sorted[(len(sorted)-1)*p/100].Round(time.Microsecond)
}

// connectionRate is how many new connections, each with one GET, two goroutines complete
// per second for d.
func connectionRate(cfg *tls.Config, addr string, d time.Duration) float64 {
	latencies(cfg, addr, 1, false) // awake
	var done atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client(cfg, addr, false, time.Minute)
			for time.Now().Before(end) {
				if _, err := get(c); err == nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / d.Seconds()
}

// apiserverPort is the port the provider leased for the cluster's apiserver.
func apiserverPort(root string) int {
	book, err := portallocator.Open(filepath.Join(root, "leases.json"), portallocator.Range{First: 1024, Last: 1024}) // read, never acquired from
	measure.Check(err)
	for _, l := range book.Leases() {
		if l.Holder == cluster+"/kube-apiserver" {
			return l.Port
		}
	}
	measure.Check(fmt.Errorf("no lease for %s in leases.json", cluster))
	return 0
}
