package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"socialweb.computer/kcp/internal/clusterprovider"
)

// imagesCmd is "images load CLUSTER FILE...": like `kind load image-archive`, image
// archives into every real guest of a cluster, now and for the guests added later. No
// registry can be reached from the guests; this is how a tenant's own images get there.
func imagesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Load image archives into a cluster's real guests (run on the provider's host)",
	}
	var dataRoot string
	load := &cobra.Command{
		Use:   "load NAME FILE...",
		Short: "Load OCI or docker-save archives into every real guest of cluster NAME, now and for guests added later",
		Example: `  docker save app:1 -o app.tar   # or any OCI image layout archive
  socialweb-kcp images load demo app.tar
  kubectl --kubeconfig demo.kubeconfig run app --image=app:1`,
		Args: args(2, -1, "NAME FILE..."),
		RunE: func(cmd *cobra.Command, a []string) error {
			dataDir, err := hostDataDir(cmd.Context(), g, a[0], dataRoot)
			if err != nil {
				return err
			}
			loaded, err := clusterprovider.LoadImages(cmd.Context(), dataDir, a[1:])
			if err != nil {
				return err
			}
			for _, l := range loaded {
				guests := "no real guest runs now; each one added boots with it"
				if len(l.Guests) > 0 {
					guests = "into " + strings.Join(l.Guests, ", ")
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s loaded %s\n", l.File, strings.Join(l.Names, ", "), guests)
			}
			return nil
		},
	}
	addDataRootFlag(load, &dataRoot)
	cmd.AddCommand(load)
	return cmd
}
