package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/instancelease"
	"socialweb.computer/kcp/internal/placement"
)

func hostsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "hosts",
		Short: "List the provider instances on the front: INSTANCE LIVE LEASE-AGE BOUND RUNNING CAPACITY MEMORY-FREE WHERE",
		Long: "Each serve that shares the front registers as an instance with a Lease it renews every 10 s. " +
			"BOUND counts the Clusters bound to it (parked and sleeping ones too: their data is on its host), RUNNING those with processes now.",
		Args: args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := g.front()
			if err != nil {
				return err
			}
			leases, err := instancelease.List(cmd.Context(), f.core)
			if err != nil {
				return f.explain(err, "instance leases", "")
			}
			cls, err := f.clusters(cmd.Context(), true)
			if err != nil {
				return err
			}
			if len(leases) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no provider instance has registered on the front: is serve running?")
				return nil
			}
			return hostsTable(cmd.OutOrStdout(), leases, boundCounts(cls), time.Now())
		},
	}
}

// boundCounts is how many Clusters are bound to each instance, counted as placement counts
// them: an unbound Cluster whose status names an instance is bound back there, and holds
// its slot meanwhile.
func boundCounts(cls []v1alpha1.Cluster) map[string]int {
	n := map[string]int{}
	for _, c := range cls {
		if h := v1alpha1.HoldingInstance(c.Labels, c.Status.Instance); h != "" {
			n[h]++
		}
	}
	return n
}

// hostsTable is hosts' table: one row per instance.
func hostsTable(w io.Writer, leases []instancelease.Lease, bound map[string]int, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tLIVE\tLEASE-AGE\tBOUND\tRUNNING\tCAPACITY\tMEMORY-FREE\tCPU-FREE\tWHERE")
	for _, l := range leases {
		capacity := "unlimited"
		if l.Capacity != placement.Unlimited {
			capacity = strconv.Itoa(l.Capacity)
		}
		mem := "-"
		if l.MemoryAvailable > 0 {
			mem = fmt.Sprintf("%.1fGi", float64(l.MemoryAvailable)/(1<<30))
		}
		cpu := "-"
		if l.CPUIdle >= 0 {
			cpu = fmt.Sprintf("%.2f", float64(l.CPUIdle)/1000)
		}
		live := "yes"
		if !l.Live(now) {
			live = "no (expired)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", l.Name, live, Age(now.Sub(l.Renewed)), bound[l.Name], l.Running, capacity, mem, cpu, orDash(l.Where))
	}
	return tw.Flush()
}
