package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/clusterprovider"
)

// The output formats of -o, as kubectl names them.
const (
	outTable = ""
	outWide  = "wide"
	outYAML  = "yaml"
	outJSON  = "json"
	outName  = "name"
)

// outputFormat is -o's value, checked when the flag is parsed.
type outputFormat string

func (o *outputFormat) String() string { return string(*o) }
func (o *outputFormat) Type() string   { return "name|wide|yaml|json" }
func (o *outputFormat) Set(v string) error {
	switch v {
	case outTable, outWide, outYAML, outJSON, outName:
		*o = outputFormat(v)
		return nil
	}
	return fmt.Errorf("want name, wide, yaml or json")
}

func addOutputFlag(cmd *cobra.Command, o *outputFormat) {
	cmd.Flags().VarP(o, "output", "o", "name, wide, yaml or json")
}

// printStructured prints v as -o yaml, json or name asks, and says whether it did (false:
// output is a table, the caller's to print). names are the objects' names and resource
// their plural-less resource name (cluster, node), for kubectl's -o name:
// cluster.socialweb.computer/demo.
func printStructured(w io.Writer, output outputFormat, resource string, names []string, v any) (bool, error) {
	switch output {
	case outYAML, outJSON:
		return true, printObject(w, string(output), v)
	case outName:
		for _, n := range names {
			if _, err := fmt.Fprintf(w, "%s.%s/%s\n", resource, v1alpha1.Group, n); err != nil {
				return true, err
			}
		}
		return true, nil
	}
	return false, nil
}

func clusterNames(cls ...v1alpha1.Cluster) []string {
	out := make([]string, len(cls))
	for i := range cls {
		out[i] = cls[i].Name
	}
	return out
}

func nodeNames(ns []v1alpha1.Node) []string {
	out := make([]string, len(ns))
	for i := range ns {
		out[i] = ns[i].Name
	}
	return out
}

// clusterTable is ls's table: NAME PHASE NODES AGE LAST-ACTIVE URL (LAST-ACTIVE: how long
// ago a sleeping cluster last had a request, written as AGE is), and with wide the
// namespace, account, instance and the Ready condition's message.
func clusterTable(w io.Writer, cls []v1alpha1.Cluster, wide bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	head := "NAME\tPHASE\tNODES\tAGE\tLAST-ACTIVE\tURL"
	if wide {
		head = "NAMESPACE\t" + head + "\tACCOUNT\tINSTANCE\tMESSAGE"
	}
	fmt.Fprintln(tw, head)
	for _, c := range cls {
		active := "-"
		if c.Status.LastActive != nil {
			active = Age(now.Sub(c.Status.LastActive.Time))
		}
		row := strings.Join([]string{c.Name, orDash(c.Status.Phase), strconv.Itoa(int(c.Status.Nodes)), Age(now.Sub(c.CreationTimestamp.Time)), active, orDash(c.Status.URL)}, "\t")
		if wide {
			row = c.Namespace + "\t" + row + "\t" + c.Spec.Account + "\t" + orDash(c.Status.Instance) + "\t" + orDash(readyMessage(c))
		}
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}

// nodeTable is nodes ls's table: NAME ID PHASE PROVIDER-ID AGE, and with wide the guest and
// the phase's message.
func nodeTable(w io.Writer, ns []v1alpha1.Node, wide bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	head := "NAME\tID\tPHASE\tPROVIDER-ID\tAGE"
	if wide {
		head += "\tGUEST\tMESSAGE"
	}
	fmt.Fprintln(tw, head)
	for _, n := range ns {
		row := strings.Join([]string{n.Name, n.Spec.NodeID, orDash(n.Status.Phase), orDash(n.Status.ProviderID), Age(now.Sub(n.CreationTimestamp.Time))}, "\t")
		if wide {
			row += "\t" + orDash(n.Status.Guest) + "\t" + orDash(n.Status.Message)
		}
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}

// printObject writes v (an object, or a list of them) as yaml or json.
func printObject(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return err
	}
	if format == outYAML {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// list is what -o yaml|json prints for many objects, as kubectl does.
func list[T any](items []T) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "List", "items": items}
}

// Age is kubectl's AGE column (apimachinery's HumanDuration, which kubectl uses): 45s,
// 3m12s, 5h30m, 3d5h, 2y40d.
func Age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return duration.HumanDuration(d)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func readyMessage(c v1alpha1.Cluster) string {
	if cond := meta.FindStatusCondition(c.Status.Conditions, "Ready"); cond != nil {
		return cond.Message
	}
	return ""
}

func readyReason(c v1alpha1.Cluster) string {
	if cond := meta.FindStatusCondition(c.Status.Conditions, "Ready"); cond != nil {
		return cond.Reason
	}
	return ""
}

// progress is one line of a live display (up, down, nodes add|rm): what the provider
// reports it is doing with one object, printed each time that changes.
type progress struct{ Name, Phase, Message string }

func clusterProgress(c v1alpha1.Cluster) progress {
	if c.Status.Phase == "" {
		return progress{Phase: "Declared", Message: "waiting for the provider to pick it up"}
	}
	return progress{Phase: c.Status.Phase, Message: readyMessage(c)}
}

func nodeProgress(n v1alpha1.Node) progress {
	if n.Status.Phase == "" {
		return progress{Name: n.Name, Phase: "Declared", Message: "waiting for the provider to pick it up"}
	}
	return progress{Name: n.Name, Phase: n.Status.Phase, Message: n.Status.Message}
}

func (p progress) line(elapsed time.Duration) string {
	name := ""
	if p.Name != "" {
		name = p.Name + "  "
	}
	return strings.TrimRight(fmt.Sprintf("%6.1fs  %s%-13s %s", elapsed.Seconds(), name, p.Phase, p.Message), " ")
}

// upVerdict says whether up's wait is over: done when the cluster is Ready; an error when
// the provider reports a failure that waiting will not mend on its own.
func upVerdict(c v1alpha1.Cluster) (done bool, err error) {
	switch {
	case c.Status.Phase == v1alpha1.PhaseReady && c.Status.URL != "":
		return true, nil
	case readyReason(c) == clusterprovider.LocalNameTaken:
		return false, fmt.Errorf("cluster %s: %s", c.Name, readyMessage(c))
	case readyReason(c) == "BringUpFailed":
		return false, fmt.Errorf("cluster %s: %s (the provider retries with backoff; socialweb-kcp status %s shows how it goes, socialweb-kcp down %s removes it)", c.Name, readyMessage(c), c.Name, c.Name)
	}
	return false, nil
}
