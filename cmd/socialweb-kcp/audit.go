package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/auditlog"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/clusterstack"
)

// auditCmd shows a tenant apiserver's recent audit events. The log is a file in the
// cluster's DataDir, which only the provider's host holds: this command reads it there
// (--data-root), after the front has said that NAME is a cluster of the namespace.
func auditCmd(g *globals) *cobra.Command {
	var (
		tail     int
		dataRoot string
		output   outputFormat
	)
	cmd := &cobra.Command{
		Use:   "audit NAME",
		Short: "Show cluster NAME's recent audit events (run on the provider's host)",
		Long: `Show the last --tail events of cluster NAME's audit log: who did what to which
object, and the answer. Reads metadata for reads and request bodies for writes; Secret
values are never logged. -o json prints the events as the apiserver wrote them.`,
		Args: func(cmd *cobra.Command, a []string) error {
			if err := args(1, 1, "NAME")(cmd, a); err != nil {
				return err
			}
			if tail < 1 {
				return usageError{fmt.Errorf("--tail %d: want a number of events, 1 or more", tail)}
			}
			return tableOrJSON(cmd, output)
		},
		RunE: func(cmd *cobra.Command, a []string) error {
			dataDir, err := hostDataDir(cmd.Context(), g, a[0], dataRoot)
			if err != nil {
				return err
			}
			events, err := auditlog.Recent(clusterstack.Spec{DataDir: dataDir}.Layout().AuditLog(), tail)
			if err != nil {
				return err
			}
			return printAudit(cmd.OutOrStdout(), events, output)
		},
	}
	cmd.Flags().IntVar(&tail, "tail", 20, "how many of the newest events to show")
	addDataRootFlag(cmd, &dataRoot)
	addOutputFlag(cmd, &output)
	return cmd
}

// tableOrJSON refuses an -o the command does not print (it prints a table or json).
func tableOrJSON(cmd *cobra.Command, output outputFormat) error {
	if output != outTable && output != outJSON {
		return usageError{fmt.Errorf("-o %s: %s prints a table or json", output, cmd.Name())}
	}
	return nil
}

// addDataRootFlag is --data-root, for the commands that read a cluster's DataDir.
func addDataRootFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "data-root", defaultDataRoot(), "serve's --data-root (env SOCIALWEB_DATA_ROOT)")
}

// hostDataDir is cluster name's DataDir under dataRoot, once the front has said that name
// is a cluster of the namespace. A command that reads it (audit, certs) runs on the
// provider's host, as the operator: the DataDir is nowhere else.
func hostDataDir(ctx context.Context, g *globals, name, dataRoot string) (string, error) {
	dataDir, _, _, err := hostCluster(ctx, g, name, dataRoot)
	return dataDir, err
}

// hostCluster is hostDataDir with the front and the Cluster as the front has it.
func hostCluster(ctx context.Context, g *globals, name, dataRoot string) (string, *front, v1alpha1.Cluster, error) {
	f, err := g.front()
	if err != nil {
		return "", nil, v1alpha1.Cluster{}, err
	}
	cl, err := f.cluster(ctx, name)
	if err != nil {
		return "", nil, v1alpha1.Cluster{}, err
	}
	dataDir := clusterprovider.DataDirOf(dataRoot, clusterprovider.LocalNameOf(&cl))
	if _, err := os.Stat(dataDir); err != nil {
		return "", nil, v1alpha1.Cluster{}, fmt.Errorf("--data-root %s: no DataDir of cluster %s here (%w); run this on the provider's host, with serve's --data-root", dataRoot, name, err)
	}
	return dataDir, f, cl, nil
}

// printAudit prints events oldest first: a table, or (-o json) each event's own line.
func printAudit(w io.Writer, events []auditlog.Event, output outputFormat) error {
	if output == outJSON {
		for _, e := range events {
			if _, err := fmt.Fprintf(w, "%s\n", e.Raw); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tUSER\tVERB\tRESOURCE\tNAMESPACE\tNAME\tCODE")
	for _, e := range events {
		resource, code := e.Resource, strconv.Itoa(e.Code)
		if resource == "" {
			resource = e.URI // a non-resource request: /version, /apis
		}
		if e.Code == 0 {
			code = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.UTC().Format(time.RFC3339), e.User, e.Verb, resource, orDash(e.Namespace), orDash(e.Name), code)
	}
	return tw.Flush()
}

// defaultDataRoot is serve's default data root, or SOCIALWEB_DATA_ROOT.
func defaultDataRoot() string {
	if root := os.Getenv("SOCIALWEB_DATA_ROOT"); root != "" {
		return root
	}
	return "/var/lib/socialweb-kcp"
}
