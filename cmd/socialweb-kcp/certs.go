package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"socialweb.computer/kcp/internal/certrenewal"
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
