// Command socialweb-clusterprovider hosts tenant Kubernetes control planes.
//
//	socialweb-clusterprovider up NAME [flags]          bring one cluster up; Ctrl-C reaps it
//	socialweb-clusterprovider nodes add NAME [COUNT]   add nodes (simulated, or --guest real) to a running cluster
//	socialweb-clusterprovider nodes rm NAME ID...      drain and remove nodes
//	socialweb-clusterprovider nodes ls NAME            list the cluster's guests
//	socialweb-clusterprovider serve [flags]            make the Clusters declared on a front real
//	socialweb-clusterprovider completion bash|zsh|fish shell completion
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/leftovers"
	"socialweb.computer/kcp/internal/nodeprovider"
	"socialweb.computer/kcp/internal/procgroup"
)

const long = `Hosts tenant Kubernetes control planes: each a process group of PostgreSQL, kine,
kube-control-plane (kube-apiserver, kube-controller-manager and kube-scheduler in one
process) and socialweb-cloud-controller-manager.

"serve" makes the Clusters declared on a front real (what make run and the systemd unit run).
"up NAME" brings one cluster up in the foreground and stays up until interrupted; then reaps
every process in reverse order and releases its port. The cluster's data is kept in
<data-root>/clusters/NAME unless --rm is given. While it runs, "nodes" adds simulated nodes
(kwok guests, each Ready and initialized by the CCM before it returns) and removes them
(drained, guest deleted, Node deleted by the CCM), through the cluster's control socket.`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "socialweb-clusterprovider:", err)
		os.Exit(1)
	}
}

// run executes one command line (cobra's, like socialweb-kcp's: flags before or after the
// arguments, --help on every command, "completion bash|zsh|fish").
func run(args []string, stdout, stderr io.Writer) error {
	root := &cobra.Command{
		Use:           "socialweb-clusterprovider",
		Short:         "Host tenant Kubernetes control planes",
		Long:          long,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.Help()
			return errors.New("no command given (want serve, up or nodes)")
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(serveCmd(stdout, stderr), upCmd(stdout, stderr), nodesCmd(stdout))
	root.SetArgs(args)
	return root.Execute()
}

type options struct {
	*providerFlags
	sans                         string
	rm                           bool
	timeout                      time.Duration
	maxNodes, podsPerNode, nodes int
	guest                        string
}

func upCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "up NAME",
		Short: "Bring cluster NAME up in the foreground; Ctrl-C reaps it in reverse order",
		Args: func(_ *cobra.Command, a []string) error {
			if len(a) != 1 {
				return errors.New("up: give the cluster's NAME, for example: up demo")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, a []string) error { return up(a[0], o, stdout, stderr) },
	}
	fs := cmd.Flags()
	o.providerFlags = addProviderFlags(fs)
	fs.StringVar(&o.sans, "san", "", "extra comma-separated names or IPs for the apiserver certificate")
	fs.BoolVar(&o.rm, "rm", false, "remove the cluster's DataDir after teardown")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "bring-up deadline")
	fs.IntVar(&o.maxNodes, "max-nodes", 0, "node quota: the CCM initializes at most this many Nodes (0: no quota)")
	fs.IntVar(&o.podsPerNode, "pods-per-node", 0, "pods per node, published on each Node as node.socialweb.computer/pods-per-node (0: 110)")
	fs.IntVar(&o.nodes, "nodes", 0, "nodes the cluster should have once Ready (added if fewer are listed)")
	fs.StringVar(&o.guest, "guest", nodeprovider.KindKwok, "kind of guest --nodes adds: kwok (simulated) or real (containerd and a kubelet in namespaces of this host)")
	return cmd
}

func up(name string, o *options, stdout, stderr io.Writer) error {
	cfg, err := o.config(stderr)
	if err != nil {
		return err
	}
	if o.maxNodes < 0 {
		return fmt.Errorf("--max-nodes: %d is negative; want 0 (no quota) or more", o.maxNodes)
	}
	if o.nodes < 0 || o.nodes > 100 {
		return fmt.Errorf("--nodes: %d; want 0 to 100", o.nodes)
	}
	if o.guest != nodeprovider.KindKwok && o.guest != nodeprovider.KindReal {
		return fmt.Errorf("--guest: %q; want %s or %s", o.guest, nodeprovider.KindKwok, nodeprovider.KindReal)
	}
	if o.podsPerNode < 0 {
		return fmt.Errorf("--pods-per-node: %d is negative; want 0 (the default, 110) or more", o.podsPerNode)
	}
	cfg.MaxNodes, cfg.PodsPerNode = o.maxNodes, o.podsPerNode
	cfg.OnEvent = func(cluster string, e procgroup.Event) {
		switch e.Phase {
		case "ready", "stopped":
			fmt.Fprintf(stdout, "  %-24s %-8s %6.2fs\n", e.Step, e.Phase, e.Elapsed.Seconds())
		case "failed":
			fmt.Fprintf(stdout, "  %-24s failed  %6.2fs\n", e.Step, e.Elapsed.Seconds())
		}
	}
	if o.sans != "" {
		cfg.SANs = strings.Split(o.sans, ",")
	}
	lock, err := lockRoot(cfg.DataRoot)
	if err != nil {
		return err
	}
	defer lock.Release()
	p, err := clusterprovider.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := stopContext(stdout, p.Kill)
	defer stop()
	upCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	t0 := time.Now()
	fmt.Fprintf(stdout, "bringing up cluster %s\n", name)
	c, err := p.Up(upCtx, name)
	if err != nil && ctx.Err() != nil {
		// Stopped mid bring-up: Spawn reaped what it had started, in reverse.
		return confirmStopped(func() (leftovers.Leftovers, error) { return p.LeftoversOf(name) }, stdout, fmt.Sprintf("cluster %s stopped before it was Ready; nothing of it is running", name))
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster %s is Ready in %.2fs at %s\n", name, time.Since(t0).Seconds(), c.URL)
	stopControl, err := serveControl(c)
	if err != nil {
		return errors.Join(err, c.Stop())
	}
	defer stopControl()
	if o.nodes > 0 {
		// --nodes is how many the cluster should have: a restart does not add more.
		list, err := c.Instances()
		if err != nil {
			return errors.Join(err, c.Stop())
		}
		for _, id := range clusterprovider.NextNodeIDs(list, max(0, o.nodes-len(list))) {
			t1 := time.Now()
			g, err := c.AddNodeOf(upCtx, id, o.guest)
			if err != nil {
				return errors.Join(err, c.Stop())
			}
			fmt.Fprintf(stdout, "  node %-22s Ready  %6.2fs\n", g.Name, time.Since(t1).Seconds())
		}
	}
	fmt.Fprintf(stdout, "tenant kubeconfig: %s\n", c.TenantKubeconfig)
	fmt.Fprintf(stdout, "  kubectl --kubeconfig %s get ns\n", c.TenantKubeconfig)
	fmt.Fprintln(stdout, "press Ctrl-C to stop it")
	var died error
	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, "stopping: reaping in reverse order")
	case ex := <-c.Exited():
		died = fmt.Errorf("cluster %s: %s exited on its own (%v); last output:\n  %s", name, ex.Step, ex.Err, strings.Join(ex.Tail, "\n  "))
		fmt.Fprintf(stdout, "%s exited on its own; reaping the rest in reverse order\n", ex.Step)
	}
	t1 := time.Now()
	if o.rm {
		err = c.Destroy()
	} else {
		err = c.Stop()
	}
	if err == nil {
		err = confirmStopped(c.Leftovers, stdout, fmt.Sprintf("cluster %s stopped in %.2fs; nothing of it is running", name, time.Since(t1).Seconds()))
	}
	return errors.Join(died, err)
}

const nodesUse = "nodes add NAME [COUNT] | nodes rm NAME ID... | nodes ls NAME"

// nodesCmd is "nodes add|rm|ls NAME ...": requests to the provider that runs NAME.
func nodesCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "Add, remove and list the simulated nodes of a cluster that up runs",
		RunE: func(_ *cobra.Command, a []string) error {
			if len(a) > 0 {
				return fmt.Errorf("unknown nodes verb %q; usage: %s", a[0], nodesUse)
			}
			return fmt.Errorf("usage: %s", nodesUse)
		},
	}
	guest := new(string)
	verb := func(use, short string) *cobra.Command {
		dataRoot := new(string)
		c := &cobra.Command{
			Use:   use,
			Short: short,
			Args: func(_ *cobra.Command, a []string) error {
				if len(a) == 0 {
					return fmt.Errorf("usage: %s", nodesUse)
				}
				return nil
			},
			RunE: func(c *cobra.Command, a []string) error {
				return nodes(c.Name(), a[0], a[1:], *dataRoot, *guest, stdout)
			},
		}
		addDataRootFlag(c.Flags(), dataRoot)
		return c
	}
	add := verb("add NAME [COUNT]", "Add COUNT (1) nodes, each Ready and initialized by the CCM")
	add.Flags().StringVar(guest, "guest", nodeprovider.KindKwok, "kind of guest: kwok (simulated) or real (containerd and a kubelet in namespaces of this host)")
	cmd.AddCommand(
		add,
		verb("rm NAME ID...", "Drain and remove nodes"),
		verb("ls NAME", "List the cluster's guests"))
	return cmd
}

func nodes(verb, name string, rest []string, dataRoot, guest string, stdout io.Writer) error {
	pos := append([]string{verb, name}, rest...)
	hc, err := controlClient(dataRoot, name)
	if err != nil {
		return err
	}
	var out []nodeView
	switch verb {
	case "ls":
		out, err = call(hc, "GET", "/nodes")
	case "add":
		count := "1"
		if len(pos) > 2 {
			count = pos[2]
		}
		if n, cerr := strconv.Atoi(count); cerr != nil || n < 1 || n > 100 {
			return fmt.Errorf("nodes add: COUNT %q: want a whole number from 1 to 100", count)
		}
		if guest != nodeprovider.KindKwok && guest != nodeprovider.KindReal {
			return fmt.Errorf("nodes add: --guest %q: want %s or %s", guest, nodeprovider.KindKwok, nodeprovider.KindReal)
		}
		out, err = call(hc, "POST", "/nodes?count="+count+"&guest="+url.QueryEscape(guest))
	case "rm":
		if len(pos) < 3 {
			return fmt.Errorf("nodes rm: give the node ids to remove, for example: nodes rm %s n1", name)
		}
		for _, id := range pos[2:] {
			var one []nodeView
			if one, err = call(hc, "DELETE", "/nodes/"+url.PathEscape(id)); err != nil {
				break
			}
			out = append(out, one...)
		}
	default:
		return fmt.Errorf("unknown nodes verb %q; usage: %s", verb, nodesUse)
	}
	for _, n := range out {
		line := fmt.Sprintf("%-28s %-6s %s", n.Name, n.NodeID, n.State)
		if n.Seconds > 0 {
			line += fmt.Sprintf(" %.2fs", n.Seconds)
		}
		fmt.Fprintln(stdout, strings.TrimRight(line, " "))
	}
	return err
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
