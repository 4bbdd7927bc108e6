// Command socialweb-clusterprovider hosts tenant Kubernetes control planes.
//
//	socialweb-clusterprovider up NAME [flags]   bring one cluster up; Ctrl-C reaps it
//
// Later verbs (serve, the front) grow beside "up".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/procgroup"
)

const usage = `usage: socialweb-clusterprovider up NAME [flags]

Brings the tenant cluster NAME up (PostgreSQL, kine, kube-apiserver, kube-controller-manager,
kube-scheduler, socialweb-cloud-controller-manager), prints where its kubeconfig is, and stays up until interrupted; then reaps
every process in reverse order and releases its port. The cluster's data is kept in
<data-root>/clusters/NAME unless --rm is given.

flags:
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "socialweb-clusterprovider:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		fs, _ := newFlags(stderr)
		fs.PrintDefaults()
		if len(args) == 0 {
			return errors.New("no command given")
		}
		return nil
	}
	switch args[0] {
	case "up":
		return up(args[1:], stdout, stderr)
	}
	return fmt.Errorf("unknown command %q (want: up)", args[0])
}

type options struct {
	dataRoot, binDir, ports, sans string
	verbose, rm                   bool
	timeout                       time.Duration
	maxNodes, podsPerNode         int
}

func newFlags(out io.Writer) (*flag.FlagSet, *options) {
	o := &options{}
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.dataRoot, "data-root", envOr("SOCIALWEB_DATA_ROOT", "/var/lib/socialweb-kcp"), "where the lease book and every cluster's DataDir live (env SOCIALWEB_DATA_ROOT)")
	fs.StringVar(&o.binDir, "bin-dir", envOr("SOCIALWEB_BIN_DIR", defaultBinDir()), "where kine and the Kubernetes binaries are (env SOCIALWEB_BIN_DIR)")
	fs.StringVar(&o.ports, "port-range", envOr("SOCIALWEB_PORT_RANGE", "30000-30999"), "ports the apiservers may lease, FIRST-LAST (env SOCIALWEB_PORT_RANGE)")
	fs.StringVar(&o.sans, "san", "", "extra comma-separated names or IPs for the apiserver certificate")
	fs.BoolVar(&o.verbose, "v", false, "copy every component's log to stderr")
	fs.BoolVar(&o.rm, "rm", false, "remove the cluster's DataDir after teardown")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "bring-up deadline")
	fs.IntVar(&o.maxNodes, "max-nodes", 0, "node quota: the CCM initializes at most this many Nodes (0: no quota)")
	fs.IntVar(&o.podsPerNode, "pods-per-node", 0, "pods per node, published on each Node as node.socialweb.computer/pods-per-node (0: 110)")
	return fs, o
}

func up(args []string, stdout, stderr io.Writer) error {
	fs, o := newFlags(stderr)
	// Accept the name before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if name == "" {
		return errors.New("up: give the cluster's NAME, for example: up demo")
	}
	rng, err := portallocator.ParseRange(o.ports)
	if err != nil {
		return fmt.Errorf("--port-range: %w", err)
	}
	if o.maxNodes < 0 {
		return fmt.Errorf("--max-nodes: %d is negative; want 0 (no quota) or more", o.maxNodes)
	}
	if o.podsPerNode < 0 {
		return fmt.Errorf("--pods-per-node: %d is negative; want 0 (the default, 110) or more", o.podsPerNode)
	}
	cfg := clusterprovider.Config{
		DataRoot: o.dataRoot, BinDir: o.binDir, Ports: rng, MaxNodes: o.maxNodes, PodsPerNode: o.podsPerNode,
		OnEvent: func(cluster string, e procgroup.Event) {
			switch e.Phase {
			case "ready", "stopped":
				fmt.Fprintf(stdout, "  %-24s %-8s %6.2fs\n", e.Step, e.Phase, e.Elapsed.Seconds())
			case "failed":
				fmt.Fprintf(stdout, "  %-24s failed  %6.2fs\n", e.Step, e.Elapsed.Seconds())
			}
		},
	}
	if o.sans != "" {
		cfg.SANs = strings.Split(o.sans, ",")
	}
	if o.verbose {
		cfg.Log = stderr
	}
	p, err := clusterprovider.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	upCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	t0 := time.Now()
	fmt.Fprintf(stdout, "bringing up cluster %s\n", name)
	c, err := p.Up(upCtx, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster %s is Ready in %.2fs at %s\n", name, time.Since(t0).Seconds(), c.URL)
	fmt.Fprintf(stdout, "tenant kubeconfig: %s\n", c.TenantKubeconfig)
	fmt.Fprintf(stdout, "  kubectl --kubeconfig %s get ns\n", c.TenantKubeconfig)
	fmt.Fprintln(stdout, "press Ctrl-C to stop it")
	var died error
	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, "stopping: reaping in reverse order")
	case ex := <-c.Group().Exited():
		died = fmt.Errorf("cluster %s: %s exited on its own (%v); last output:\n  %s", name, ex.Step, ex.Err, strings.Join(ex.Tail, "\n  "))
		fmt.Fprintf(stdout, "%s exited on its own; reaping the rest in reverse order\n", ex.Step)
	}
	t1 := time.Now()
	if o.rm {
		err = c.Destroy()
	} else {
		err = c.Stop()
	}
	if err != nil {
		return errors.Join(died, err)
	}
	fmt.Fprintf(stdout, "cluster %s stopped in %.2fs; nothing of it is running\n", name, time.Since(t1).Seconds())
	return died
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// defaultBinDir is bin/ beside the executable when it lives there, else ./bin.
func defaultBinDir() string {
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err == nil {
			return dir
		}
	}
	abs, _ := filepath.Abs("bin")
	return abs
}
