// Command spawn measures a tenant control plane: time from Spawn to Ready per step (a fresh
// cluster, then a restart of it with its data kept) and the PSS of each component once idle,
// read from /proc/<pid>/smaps_rollup (Postgres: its whole process group). Median of -runs.
//
//	go run ./bench/spawn -runs 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"socialweb.computer/kcp/bench/measure"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/procgroup"
)

func main() {
	runs := flag.Int("runs", 3, "bring-ups to take the median of")
	idle := flag.Duration("idle", 15*time.Second, "how long a cluster settles before its PSS is read")
	bin := flag.String("bin-dir", "bin", "where kine and the Kubernetes binaries are")
	flag.Parse()
	binDir, _ := filepath.Abs(*bin)
	root, remove := measure.DataRoot()
	defer remove()

	var mu sync.Mutex
	var cur map[procgroup.Component]time.Duration
	p, err := clusterprovider.New(clusterprovider.Config{
		DataRoot: root, BinDir: binDir, Ports: portallocator.Range{First: 32000, Last: 32999},
		OnEvent: func(_ string, e procgroup.Event) {
			if e.Phase == "ready" {
				mu.Lock()
				cur[e.Step] = e.Elapsed
				mu.Unlock()
			}
		},
	})
	measure.Check(err)

	type sample struct {
		steps map[procgroup.Component]time.Duration
		total time.Duration
	}
	var fresh, restart []sample
	pss := map[string][]float64{}
	var order []procgroup.Component
	for i := 0; i < *runs; i++ {
		name := fmt.Sprintf("bench%d", i)
		for pass := 0; pass < 2; pass++ {
			cur = map[procgroup.Component]time.Duration{}
			t0 := time.Now()
			c, err := p.Up(context.Background(), name)
			measure.Check(err)
			s := sample{steps: cur, total: time.Since(t0)}
			if pass == 0 {
				fresh = append(fresh, s)
				time.Sleep(*idle) // a benchmark's settle time, not synchronisation
				total := 0.0
				order = order[:0]
				for _, m := range c.Group().Members() {
					order = append(order, m.Step)
					v := measure.GroupPSS(m.Identity.Pid)
					pss[m.Step.String()] = append(pss[m.Step.String()], v)
					total += v
				}
				pss["total"] = append(pss["total"], total)
				measure.Check(c.Stop())
			} else {
				restart = append(restart, s)
				measure.Check(c.Destroy())
			}
		}
	}

	host, _ := os.Hostname()
	fmt.Printf("machine: %s, %d runs, median; %s\n", host, *runs, measure.CPUModel())
	fmt.Printf("%-26s %12s %12s %12s\n", "step", "fresh (s)", "restart (s)", "idle PSS MiB")
	for _, c := range order {
		var f, r []float64
		for _, s := range fresh {
			f = append(f, s.steps[c].Seconds())
		}
		for _, s := range restart {
			r = append(r, s.steps[c].Seconds())
		}
		fmt.Printf("%-26s %12.2f %12.2f %12.1f\n", c, measure.Median(f), measure.Median(r), measure.Median(pss[c.String()]))
	}
	var ft, rt []float64
	for _, s := range fresh {
		ft = append(ft, s.total.Seconds())
	}
	for _, s := range restart {
		rt = append(rt, s.total.Seconds())
	}
	fmt.Printf("%-26s %12.2f %12.2f %12.1f\n", "whole group (Up to Ready)", measure.Median(ft), measure.Median(rt), measure.Median(pss["total"]))
}
