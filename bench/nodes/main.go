// Command nodes measures simulated guests: the time from "add node" to the Node Ready and
// initialized by the CCM, node after node in one cluster, so it shows how that time grows
// from 1 to -nodes; and the PSS of kwok and the CCM at the end.
//
//	go run ./bench/nodes -nodes 50
package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"socialweb.computer/kcp/bench/measure"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/procgroup"
)

func main() {
	n := flag.Int("nodes", 50, "nodes to add, one after another")
	bin := flag.String("bin-dir", "bin", "where the binaries are")
	flag.Parse()
	binDir, _ := filepath.Abs(*bin)
	root, remove := measure.DataRoot()
	defer remove()
	p, err := clusterprovider.New(clusterprovider.Config{DataRoot: root, BinDir: binDir, Ports: portallocator.Range{First: 32000, Last: 32999}})
	measure.Check(err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, err := p.Up(ctx, "benchnodes")
	measure.Check(err)
	defer c.Destroy()

	took := make([]float64, 0, *n)
	for i := 1; i <= *n; i++ {
		t0 := time.Now()
		_, err := c.AddNode(ctx, fmt.Sprintf("n%d", i))
		measure.Check(err)
		took = append(took, time.Since(t0).Seconds())
	}
	fmt.Printf("machine: %s; %d nodes added one after another to one cluster\n", measure.CPUModel(), *n)
	fmt.Printf("first node (starts kwok): %.2fs\n", took[0])
	fmt.Printf("%-22s %s\n", "nodes already there", "add to Ready+initialized (s), median of the 5 adds ending there")
	for _, k := range []int{5, 10, 20, 30, 40, 50} {
		if k > len(took) {
			break
		}
		fmt.Printf("%-22d %.2f\n", k-1, measure.Median(took[k-5:k]))
	}
	fmt.Printf("median over all %d adds: %.2fs\n", len(took), measure.Median(took))
	for _, m := range c.Group().Members() {
		if m.Step == procgroup.ComponentCloudControllerManager {
			fmt.Printf("cloud-controller-manager PSS at %d nodes: %.1f MiB\n", *n, measure.GroupPSS(m.Identity.Pid))
		}
	}
	if g := c.NodeGroup(); g != nil {
		for _, m := range g.Members() {
			fmt.Printf("kwok PSS at %d nodes: %.1f MiB\n", *n, measure.GroupPSS(m.Identity.Pid))
		}
	}
}
