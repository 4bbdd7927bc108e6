package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/cgroups"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/portallocator"
)

// providerFlags are the flags of every verb that runs clusters (up, serve).
type providerFlags struct {
	dataRoot, binDir, ports, k3sBinary string
	bindAddress, advertiseAddress      string
	verbose                            bool
	certs                              certrenewal.Policy
	cgroups, tenantUsers               bool
	memory, cpu                        string
	pids, objects                      int64
}

// postgresBinDir is where initdb and postgres are (Debian's postgresql-15 package); a
// variable so that the tests can point it at fakes.
var postgresBinDir = clusterstack.DefaultPostgresBin

func addDataRootFlag(fs *pflag.FlagSet, dst *string) {
	fs.StringVar(dst, "data-root", envOr("SOCIALWEB_DATA_ROOT", "/var/lib/socialweb-kcp"), "where the lease book, the front and every cluster's DataDir live (env SOCIALWEB_DATA_ROOT)")
}

func addProviderFlags(fs *pflag.FlagSet) *providerFlags {
	f := &providerFlags{}
	addDataRootFlag(fs, &f.dataRoot)
	fs.StringVar(&f.binDir, "bin-dir", envOr("SOCIALWEB_BIN_DIR", defaultBinDir()), "where kine and the Kubernetes binaries are (env SOCIALWEB_BIN_DIR)")
	fs.StringVar(&f.ports, "port-range", envOr("SOCIALWEB_PORT_RANGE", "30000-30999"), "ports the apiservers may lease, FIRST-LAST (env SOCIALWEB_PORT_RANGE)")
	fs.StringVar(&f.k3sBinary, "k3s-binary", "", "path to a k3s binary: runs each control plane as k3s server instead of kube-apiserver/controller-manager/scheduler (not live-tested here)")
	fs.StringVar(&f.bindAddress, "apiserver-bind-address", "", "the IP the tenant apiservers listen on (default 127.0.0.1; beyond loopback their ports are open to the network, not only the front door)")
	fs.StringVar(&f.advertiseAddress, "apiserver-advertise-address", "", "the IP the tenant apiservers tell their clusters to reach them at (default: the bind address, or 127.0.0.1 with 0.0.0.0)")
	fs.DurationVar(&f.certs.Validity, "cert-validity", certrenewal.DefaultValidity, "how long a leaf certificate minted from now on is valid (CAs: ten years)")
	fs.Float64Var(&f.certs.Share, "cert-renew-share", certrenewal.DefaultShare, "renew a cluster's leaf certificates when less than this share of the validity of one is left: a running cluster (and the front) is restarted, one at a time, to read them; a stopped one renews them at its start")
	fs.BoolVar(&f.cgroups, "cgroups", true, "run each tenant cluster in a control group of its own, below the provider's (cgroup v1 or v2), with its limits")
	fs.BoolVar(&f.tenantUsers, "tenant-users", true, "run every process of a tenant cluster as an OS user of its own (swk-<hash>), made at its first start and removed with it")
	fs.StringVar(&f.memory, "cluster-memory", "", "each cluster's memory limit, page cache included, unless its spec.resources sets one (a quantity such as 1Gi; default none)")
	fs.StringVar(&f.cpu, "cluster-cpu", "", "each cluster's CPU limit unless its spec.resources sets one (a quantity such as 500m or 2; default none)")
	fs.Int64Var(&f.pids, "cluster-pids", 0, "each cluster's limit on processes and threads unless its spec.resources sets one (default none)")
	fs.Int64Var(&f.objects, "cluster-objects", 0, "cap the objects each cluster stores unless its spec.resources sets a cap: at the cap the tenant's creates are refused until it deletes (default none)")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "copy every component's log to stderr")
	return f
}

// config is the provider's configuration these flags give; a bad value names its flag, and
// is refused before anything starts.
func (f *providerFlags) config(stderr io.Writer) (clusterprovider.Config, error) {
	rng, err := portallocator.ParseRange(f.ports)
	if err != nil {
		return clusterprovider.Config{}, fmt.Errorf("--port-range: %w", err)
	}
	if err := portallocator.CheckNotEphemeral(rng); err != nil {
		return clusterprovider.Config{}, fmt.Errorf("--port-range %s: %w", rng, err)
	}
	if err := (certrenewal.Policy{Validity: f.certs.Validity}).Check(); err != nil {
		return clusterprovider.Config{}, fmt.Errorf("--cert-validity: %w", err)
	}
	if err := (certrenewal.Policy{Share: f.certs.Share}).Check(); err != nil {
		return clusterprovider.Config{}, fmt.Errorf("--cert-renew-share: %w", err)
	}
	if err := f.certs.Check(); err != nil {
		return clusterprovider.Config{}, fmt.Errorf("--cert-validity and --cert-renew-share: %w", err)
	}
	cfg := clusterprovider.Config{DataRoot: f.dataRoot, BinDir: f.binDir, PostgresBin: postgresBinDir, Ports: rng, Certificates: f.certs}
	if cfg.Limits.MemoryBytes, err = cgroups.ParseMemory(f.memory); err != nil {
		return clusterprovider.Config{}, fmt.Errorf("--cluster-memory %w", err)
	}
	if cfg.Limits.MilliCPU, err = cgroups.ParseCPU(f.cpu); err != nil {
		return clusterprovider.Config{}, fmt.Errorf("--cluster-cpu %w", err)
	}
	if f.pids != 0 && f.pids < 64 {
		return clusterprovider.Config{}, fmt.Errorf("--cluster-pids %d: want 64 or more, or 0 for no limit", f.pids)
	}
	cfg.Limits.Pids = f.pids
	cfg.TenantUsers = f.tenantUsers
	if f.objects < 0 {
		return clusterprovider.Config{}, fmt.Errorf("--cluster-objects %d: want a number of objects, or 0 for no cap", f.objects)
	}
	cfg.Objects = f.objects
	if f.cgroups {
		if cfg.Cgroups, err = cgroups.Detect(cgroups.Mount, clusterprovider.CgroupSubtree(f.dataRoot)); err != nil {
			return clusterprovider.Config{}, fmt.Errorf("--cgroups: %w", err)
		}
	} else if !cfg.Limits.IsZero() {
		return clusterprovider.Config{}, errors.New("--cluster-memory, --cluster-cpu and --cluster-pids need --cgroups, which --cgroups=false turns off")
	}
	if err := checkAddresses(f.bindAddress, f.advertiseAddress); err != nil {
		return clusterprovider.Config{}, err
	}
	cfg.APIServerBindAddress, cfg.APIServerAdvertiseAddress = f.bindAddress, f.advertiseAddress
	if f.k3sBinary != "" {
		if cfg.K3sBinary, err = k3sBinary(f.k3sBinary); err != nil {
			return clusterprovider.Config{}, err
		}
	}
	if f.verbose {
		cfg.Log = stderr
	}
	return cfg, nil
}

// checkAddresses refuses an apiserver address that is not an IP, a bind address this host
// does not have, and an advertise address that names no one host.
func checkAddresses(bind, advertise string) error {
	if bind != "" {
		ip := net.ParseIP(bind)
		if ip == nil {
			return fmt.Errorf("--apiserver-bind-address %q: not an IP address; give one of this host's, 0.0.0.0 for all of them, or leave it out for 127.0.0.1", bind)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		if err != nil {
			return fmt.Errorf("--apiserver-bind-address %s: cannot be bound on this host (%v); give one of this host's addresses (ip -br addr), 0.0.0.0, or leave it out for 127.0.0.1", bind, err)
		}
		l.Close()
	}
	if advertise != "" {
		ip := net.ParseIP(advertise)
		if ip == nil || ip.IsUnspecified() {
			return fmt.Errorf("--apiserver-advertise-address %q: want the one IP address the clusters' clients reach their apiserver at, not %q; or leave it out", advertise, advertise)
		}
	}
	return nil
}

// k3sBinary checks --k3s-binary: an executable regular file. It returns its absolute path,
// which the components run and the backstop looks for, whatever the working directory.
func k3sBinary(path string) (string, error) {
	const leaveOut = "or leave --k3s-binary out to run kube-apiserver, kube-controller-manager and kube-scheduler"
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("--k3s-binary %s: %w", path, err)
	}
	st, err := os.Stat(abs)
	switch {
	case err != nil:
		if e := errors.Unwrap(err); e != nil {
			err = e // the path is named already
		}
		return "", fmt.Errorf("--k3s-binary %s: %w; give the path of an installed k3s binary, %s", path, err, leaveOut)
	case st.IsDir():
		return "", fmt.Errorf("--k3s-binary %s: is a directory; give the path of the k3s binary itself, %s", path, leaveOut)
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("--k3s-binary %s: not a regular file (mode %s); give the path of the k3s binary itself, %s", path, st.Mode(), leaveOut)
	case st.Mode()&0o111 == 0:
		return "", fmt.Errorf("--k3s-binary %s: not executable (mode %s); chmod +x it, or give another path", path, st.Mode().Perm())
	}
	return abs, nil
}
