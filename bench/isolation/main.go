// Command isolation measures what a cluster's control group and OS user cost its
// bring-up: Up to Ready of a fresh cluster and of its restart, with neither, with a
// control group, with both, interleaved in one run (this host is noisy: figures of two
// runs do not compare). Median of -runs.
//
//	go run ./bench/isolation -runs 5
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"socialweb.computer/kcp/bench/measure"
	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/portallocator"
)

func main() {
	runs := flag.Int("runs", 5, "bring-ups of each kind to take the median of")
	bin := flag.String("bin-dir", "bin", "where kine and the Kubernetes binaries are")
	flag.Parse()
	binDir, _ := filepath.Abs(*bin)

	modes := []string{"neither", "cgroup", "cgroup and user"}
	providers := make([]*clusterprovider.Provider, len(modes))
	for i := range modes {
		root, remove := measure.DataRoot()
		defer remove()
		cfg := clusterprovider.Config{DataRoot: root, BinDir: binDir, Ports: portallocator.Range{First: 32000 + 100*i, Last: 32099 + 100*i}}
		if i >= 1 {
			h, err := cgroups.Detect(cgroups.Mount, clusterprovider.CgroupSubtree(root))
			measure.Check(err)
			cfg.Cgroups, cfg.Limits = h, cgroups.Limits{MemoryBytes: 1 << 30, MilliCPU: 1000, Pids: 4000}
			defer h.Group().Remove()
		}
		cfg.TenantUsers = i == 2
		p, err := clusterprovider.New(cfg)
		measure.Check(err)
		providers[i] = p
	}
	fresh, restart := map[int][]float64{}, map[int][]float64{}
	for r := 0; r < *runs; r++ {
		for i, p := range providers {
			name := fmt.Sprintf("iso%d", r)
			t0 := time.Now()
			c, err := p.Up(context.Background(), name)
			measure.Check(err)
			fresh[i] = append(fresh[i], time.Since(t0).Seconds())
			measure.Check(c.Stop())
			t0 = time.Now()
			c, err = p.Up(context.Background(), name)
			measure.Check(err)
			restart[i] = append(restart[i], time.Since(t0).Seconds())
			measure.Check(c.Destroy())
		}
	}
	host, _ := os.Hostname()
	fmt.Printf("machine: %s, %d runs each, interleaved, median; %s\n", host, *runs, measure.CPUModel())
	fmt.Printf("%-18s %12s %12s\n", "", "fresh (s)", "restart (s)")
	for i, m := range modes {
		fmt.Printf("%-18s %12.2f %12.2f\n", m, measure.Median(fresh[i]), measure.Median(restart[i]))
	}
	fmt.Println("(fresh: a new DataDir, initdb included, and with users the useradd; restart: the same cluster again, its data kept)")
}
