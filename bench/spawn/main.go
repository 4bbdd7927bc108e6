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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
	root, err := os.MkdirTemp("", "socialweb-bench-")
	check(err)
	defer os.RemoveAll(root)
	check(os.Chmod(root, 0o711))

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
	check(err)

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
			check(err)
			s := sample{steps: cur, total: time.Since(t0)}
			if pass == 0 {
				fresh = append(fresh, s)
				time.Sleep(*idle) // a benchmark's settle time, not synchronisation
				total := 0.0
				order = order[:0]
				for _, m := range c.Group().Members() {
					order = append(order, m.Step)
					v := groupPSS(m.Identity.Pid)
					pss[m.Step.String()] = append(pss[m.Step.String()], v)
					total += v
				}
				pss["total"] = append(pss["total"], total)
				check(c.Stop())
			} else {
				restart = append(restart, s)
				check(c.Destroy())
			}
		}
	}

	host, _ := os.Hostname()
	fmt.Printf("machine: %s, %d runs, median; %s\n", host, *runs, cpuModel())
	fmt.Printf("%-26s %12s %12s %12s\n", "step", "fresh (s)", "restart (s)", "idle PSS MiB")
	for _, c := range order {
		var f, r []float64
		for _, s := range fresh {
			f = append(f, s.steps[c].Seconds())
		}
		for _, s := range restart {
			r = append(r, s.steps[c].Seconds())
		}
		fmt.Printf("%-26s %12.2f %12.2f %12.1f\n", c, median(f), median(r), median(pss[c.String()]))
	}
	var ft, rt []float64
	for _, s := range fresh {
		ft = append(ft, s.total.Seconds())
	}
	for _, s := range restart {
		rt = append(rt, s.total.Seconds())
	}
	fmt.Printf("%-26s %12.2f %12.2f %12.1f\n", "whole group (Up to Ready)", median(ft), median(rt), median(pss["total"]))
}

// groupPSS sums the PSS (MiB) of every process in pid's process group.
func groupPSS(pgid int) float64 {
	ents, _ := os.ReadDir("/proc")
	total := 0.0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) { // field 5: pgrp
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
				total += kb / 1024
			}
		}
	}
	return total
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown cpu"
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
