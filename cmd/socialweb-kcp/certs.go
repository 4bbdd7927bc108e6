package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/clusterstack"
)

// certsCmd lists every certificate a cluster holds, and the client certificate of each of
// its kubeconfigs, soonest expiry first: what the provider renews at the cluster's starts
// (serve --cert-validity, --cert-renew-share), read from the DataDir on the provider's host.
func certsCmd(g *globals) *cobra.Command {
	var (
		dataRoot string
		output   outputFormat
	)
	cmd := &cobra.Command{
		Use:   "certs NAME",
		Short: "List cluster NAME's certificates and kubeconfigs: subject, expiry, days left (run on the provider's host)",
		Args: func(cmd *cobra.Command, a []string) error {
			if err := args(1, 1, "NAME")(cmd, a); err != nil {
				return err
			}
			return tableOrJSON(cmd, output)
		},
		RunE: func(cmd *cobra.Command, a []string) error {
			dataDir, err := hostDataDir(cmd.Context(), g, a[0], dataRoot)
			if err != nil {
				return err
			}
			certs, err := certrenewal.Inventory(dataDir)
			if err != nil {
				return err
			}
			return printCerts(cmd.OutOrStdout(), dataDir, certs, output, time.Now())
		},
	}
	addDataRootFlag(cmd, &dataRoot)
	addOutputFlag(cmd, &output)
	cmd.AddCommand(certsRotateCmd(g))
	return cmd
}

// certsRotateCmd asks the provider to renew every leaf certificate and kubeconfig of a
// cluster now, the CA kept: a request file in its DataDir (certrenewal.Request), which the
// provider takes within its check interval (certrenewal.Policy.CheckEvery: 10 s at
// most) by restarting the cluster with renewed credentials, as it does when they fall due.
// It waits, following the front, until the cluster is Ready with certificates minted after
// the request; the tenant's kubeconfig Secret is delivered again by then.
func certsRotateCmd(g *globals) *cobra.Command {
	var (
		dataRoot string
		w        waitFlags
	)
	cmd := &cobra.Command{
		Use:   "rotate NAME",
		Short: "Renew every leaf certificate and kubeconfig of cluster NAME now; its CA stays (run on the provider's host)",
		Example: `  socialweb-kcp certs rotate demo
  socialweb-kcp kubeconfig demo > demo.kubeconfig   # the tenant's, delivered again`,
		Args: args(1, 1, "NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, name, out := cmd.Context(), a[0], cmd.OutOrStdout()
			dataDir, f, cl, err := hostCluster(ctx, g, name, dataRoot)
			if err != nil {
				return err
			}
			asked := time.Now()
			if err := certrenewal.Request(clusterstack.Layout{Root: dataDir}.RenewRequest(), "socialweb-kcp certs rotate, "+asked.UTC().Format(time.RFC3339)); err != nil {
				return err
			}
			fmt.Fprintf(out, "renewal of cluster %s's certificates requested\n", name)
			if !w.wait {
				return nil
			}
			if cl.Status.Phase == v1alpha1.PhaseSleeping || (cl.Spec.Running != nil && !*cl.Spec.Running) {
				fmt.Fprintf(out, "cluster %s does not run now: they are renewed when it next starts\n", name)
				return nil
			}
			since := asked.Truncate(time.Second)
			renewed := func(c v1alpha1.Cluster) (bool, error) {
				cl = c
				return c.Status.Phase == v1alpha1.PhaseReady && c.Status.CertificatesIssued != nil && !c.Status.CertificatesIssued.Time.Before(since), nil
			}
			if err := watchCluster(ctx, f, out, w.timeout, name, "Ready with renewed certificates", false, renewed); err != nil {
				return err
			}
			fmt.Fprintf(out, "cluster %s is Ready with certificates renewed at %s, the soonest expiring at %s\n", name,
				cl.Status.CertificatesIssued.UTC().Format(time.RFC3339), cl.Status.CertificatesExpire.UTC().Format(time.RFC3339))
			return nil
		},
	}
	addDataRootFlag(cmd, &dataRoot)
	addWaitFlags(cmd, &w, "the cluster is Ready with renewed certificates")
	return cmd
}

// printCerts prints certs, their paths relative to dataDir: a table, or -o json.
func printCerts(w io.Writer, dataDir string, certs []certrenewal.Cert, output outputFormat, now time.Time) error {
	type row struct {
		File     string    `json:"file"`
		Subject  string    `json:"subject"`
		CA       bool      `json:"ca"`
		NotAfter time.Time `json:"notAfter"`
		DaysLeft int       `json:"daysLeft"`
	}
	rows := make([]row, 0, len(certs))
	for _, c := range certs {
		rel, err := filepath.Rel(dataDir, c.Path)
		if err != nil {
			rel = c.Path
		}
		rows = append(rows, row{rel, c.Subject, c.CA, c.NotAfter.UTC(), int(c.NotAfter.Sub(now).Hours() / 24)})
	}
	if output == outJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tSUBJECT\tKIND\tEXPIRES\tDAYS-LEFT")
	for _, r := range rows {
		kind := "leaf"
		if r.CA {
			kind = "CA"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", r.File, r.Subject, kind, r.NotAfter.Format(time.RFC3339), r.DaysLeft)
	}
	return tw.Flush()
}
