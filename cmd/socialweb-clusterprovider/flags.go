package main

import (
	"flag"
	"fmt"
	"io"

	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/portallocator"
)

// providerFlags are the flags of every verb that runs clusters (up, serve).
type providerFlags struct {
	dataRoot, binDir, ports string
	verbose                 bool
}

func addDataRootFlag(fs *flag.FlagSet, dst *string) {
	fs.StringVar(dst, "data-root", envOr("SOCIALWEB_DATA_ROOT", "/var/lib/socialweb-kcp"), "where the lease book, the front and every cluster's DataDir live (env SOCIALWEB_DATA_ROOT)")
}

func addProviderFlags(fs *flag.FlagSet) *providerFlags {
	f := &providerFlags{}
	addDataRootFlag(fs, &f.dataRoot)
	fs.StringVar(&f.binDir, "bin-dir", envOr("SOCIALWEB_BIN_DIR", defaultBinDir()), "where kine and the Kubernetes binaries are (env SOCIALWEB_BIN_DIR)")
	fs.StringVar(&f.ports, "port-range", envOr("SOCIALWEB_PORT_RANGE", "30000-30999"), "ports the apiservers may lease, FIRST-LAST (env SOCIALWEB_PORT_RANGE)")
	fs.BoolVar(&f.verbose, "v", false, "copy every component's log to stderr")
	return f
}

// config is the provider's configuration these flags give; a bad port range names its flag.
func (f *providerFlags) config(stderr io.Writer) (clusterprovider.Config, error) {
	rng, err := portallocator.ParseRange(f.ports)
	if err != nil {
		return clusterprovider.Config{}, fmt.Errorf("--port-range: %w", err)
	}
	cfg := clusterprovider.Config{DataRoot: f.dataRoot, BinDir: f.binDir, Ports: rng}
	if f.verbose {
		cfg.Log = stderr
	}
	return cfg, nil
}
