package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/atomicfile"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/nodeprovider"
)

// waitFlags are --wait and --timeout of the commands that show a live display.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func addWaitFlags(cmd *cobra.Command, w *waitFlags, what string) {
	cmd.Flags().BoolVar(&w.wait, "wait", true, "show progress and wait until "+what+" (--wait=false returns once it is declared)")
	cmd.Flags().DurationVar(&w.timeout, "timeout", 5*time.Minute, "how long --wait waits (exit code 3 when it runs out)")
}

func upCmd(g *globals) *cobra.Command {
	var (
		account, out, guest   string
		maxNodes, podsPerNode int32
		nodes                 int
		w                     waitFlags
	)
	cmd := &cobra.Command{
		Use:   "up NAME",
		Short: "Declare cluster NAME, show its bring-up, and write NAME.kubeconfig once it is Ready",
		Example: `  socialweb-kcp up demo
  kubectl --kubeconfig demo.kubeconfig get ns
  socialweb-kcp up big --nodes 3 --max-nodes 10 -n acme
  socialweb-kcp up web --nodes 2 --guest real`,
		Args: cobra.MatchAll(args(1, 1, "NAME"), func(*cobra.Command, []string) error {
			if nodes < 0 || nodes > 100 {
				return usageError{fmt.Errorf("--nodes %d: want 0 to 100", nodes)}
			}
			if guest != "" && guest != nodeprovider.KindKwok && guest != nodeprovider.KindReal {
				return usageError{fmt.Errorf("--guest %q: want %s or %s", guest, nodeprovider.KindKwok, nodeprovider.KindReal)}
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, a []string) error {
			name := a[0]
			if account == "" {
				account = g.namespace
			}
			if out == "" {
				out = name + ".kubeconfig"
			}
			f, err := g.front()
			if err != nil {
				return err
			}
			ctx, stdout := cmd.Context(), cmd.OutOrStdout()
			cl, err := f.cluster(ctx, name)
			switch {
			case apierrors.IsNotFound(err):
				c := &v1alpha1.Cluster{TypeMeta: typeMeta("Cluster"), ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
					Spec: v1alpha1.ClusterSpec{Account: account, MaxNodes: maxNodes, PodsPerNode: podsPerNode, Guest: guest}}
				if err := f.create(ctx, c); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "cluster %s declared in namespace %s\n", name, f.ns)
			case err != nil:
				return err
			case cl.DeletionTimestamp != nil:
				return fmt.Errorf("cluster %s is being deleted; wait for socialweb-kcp down %s to end, then run up again", name, name)
			case cl.Spec.Running != nil && !*cl.Spec.Running:
				if err := f.setRunning(ctx, name, true); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "cluster %s was parked; set running\n", name)
			default:
				fmt.Fprintf(stdout, "cluster %s is already declared in namespace %s\n", name, f.ns)
			}
			if !w.wait {
				return nil
			}
			ready := func(c v1alpha1.Cluster) (bool, error) { cl = c; return upVerdict(c) }
			if err := watchCluster(ctx, f, stdout, w.timeout, name, "Ready", false, ready); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "cluster %s is Ready at %s\n", name, cl.Status.URL)
			if err := writeKubeconfig(ctx, f, name, out); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "kubeconfig written to %s\n  kubectl --kubeconfig %s get ns\n", out, out)
			// --nodes is how many the cluster should have: a second up adds none.
			have, err := f.nodes(ctx, name)
			if err != nil {
				return err
			}
			if nodes > len(have) {
				return addNodes(ctx, f, stdout, name, nodes-len(have), "", w)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&account, "account", "", "the account that owns the cluster (default: the namespace)")
	cmd.Flags().Int32Var(&maxNodes, "max-nodes", 0, "node quota the CCM enforces (0: none)")
	cmd.Flags().Int32Var(&podsPerNode, "pods-per-node", 0, "pods per node, published on each Node (0: 110)")
	cmd.Flags().IntVar(&nodes, "nodes", 0, "nodes it should have once Ready (added when fewer are declared)")
	cmd.Flags().StringVar(&guest, "guest", "", "the kind of guest its nodes get (spec.guest): kwok (simulated, the default) or real (containerd and a kubelet, running real containers)")
	cmd.Flags().StringVar(&out, "kubeconfig-out", "", "where to write the tenant kubeconfig (default NAME.kubeconfig)")
	addWaitFlags(cmd, &w, "the cluster is Ready")
	return cmd
}

// watchCluster shows cluster name's live display until done says it is over (or fails), or
// with goneIsDone, until the cluster is gone. A cluster deleted under a wait that is not
// for its deletion is an error.
func watchCluster(ctx context.Context, f *front, out io.Writer, timeout time.Duration, name, what string, goneIsDone bool, done func(v1alpha1.Cluster) (bool, error)) error {
	return f.follow(ctx, out, timeout, "cluster "+name+" "+what, clusterprovider.ClustersResource, clusterNamed(name), func(objs map[string]*unstructured.Unstructured) (map[string]progress, bool, error) {
		u, ok := objs[name]
		switch {
		case !ok && goneIsDone:
			return map[string]progress{"": {Phase: "Deleted", Message: "nodes, processes, port, data and kubeconfig Secret are gone"}}, true, nil
		case !ok: // the listing is a consistent read: the cluster is gone
			return nil, false, fmt.Errorf("cluster %s was deleted while waiting for it to be %s", name, what)
		}
		var c v1alpha1.Cluster
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c); err != nil {
			return nil, false, err
		}
		ok, err := done(c)
		return map[string]progress{"": clusterProgress(c)}, ok, err
	})
}

// writeKubeconfig writes the tenant kubeconfig the provider delivered as a Secret, 0600.
func writeKubeconfig(ctx context.Context, f *front, name, path string) error {
	b, err := tenantKubeconfig(ctx, f, name)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b, 0o600)
}

func tenantKubeconfig(ctx context.Context, f *front, name string) ([]byte, error) {
	sec, err := f.core.CoreV1().Secrets(f.ns).Get(ctx, name+"-kubeconfig", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("cluster %s has no kubeconfig yet: it is delivered once the cluster is Ready (socialweb-kcp status %s)", name, name)
	}
	if err != nil {
		return nil, f.explain(err, "secret", "")
	}
	return sec.Data["kubeconfig"], nil
}

func downCmd(g *globals) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "down NAME",
		Short: "Delete cluster NAME: its nodes, processes, port and data go; shows the teardown",
		Args:  args(1, 1, "NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			name := a[0]
			f, err := g.front()
			if err != nil {
				return err
			}
			ctx, stdout := cmd.Context(), cmd.OutOrStdout()
			err = f.dyn.Resource(clusterprovider.ClustersResource).Namespace(f.ns).Delete(ctx, name, metav1.DeleteOptions{})
			if err != nil {
				return f.explain(err, "cluster", name)
			}
			fmt.Fprintf(stdout, "cluster %s: deletion requested\n", name)
			if !w.wait {
				return nil
			}
			err = watchCluster(ctx, f, stdout, w.timeout, name, "gone", true, func(v1alpha1.Cluster) (bool, error) { return false, nil })
			if err == nil {
				fmt.Fprintf(stdout, "cluster %s is gone\n", name)
			}
			return err
		},
	}
	addWaitFlags(cmd, &w, "nothing of the cluster is left")
	return cmd
}

func parkCmd(g *globals) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "park NAME",
		Short: "Stop cluster NAME's processes and release its port, keeping its data and nodes; up brings it back",
		Args:  args(1, 1, "NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			name := a[0]
			f, err := g.front()
			if err != nil {
				return err
			}
			ctx, stdout := cmd.Context(), cmd.OutOrStdout()
			if _, err := f.cluster(ctx, name); err != nil {
				return err
			}
			if err := f.setRunning(ctx, name, false); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "cluster %s: parking requested\n", name)
			if !w.wait {
				return nil
			}
			err = watchCluster(ctx, f, stdout, w.timeout, name, "parked", false, func(c v1alpha1.Cluster) (bool, error) { return readyReason(c) == "Parked", nil })
			if err == nil {
				fmt.Fprintf(stdout, "cluster %s is parked; socialweb-kcp up %s brings it back\n", name, name)
			}
			return err
		},
	}
	addWaitFlags(cmd, &w, "its processes are stopped")
	return cmd
}

func lsCmd(g *globals) *cobra.Command {
	var (
		output       outputFormat
		all, watchIt bool
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the clusters: NAME PHASE NODES AGE URL",
		Args:    args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := g.front()
			if err != nil {
				return err
			}
			if watchIt {
				return watchClusters(cmd.Context(), f, cmd.OutOrStdout(), output, all)
			}
			cls, err := f.clusters(cmd.Context(), all)
			if err != nil {
				return err
			}
			if done, err := printStructured(cmd.OutOrStdout(), output, "cluster", clusterNames(cls...), list(cls)); done {
				return err
			}
			if len(cls) == 0 && output == outTable {
				fmt.Fprintf(cmd.ErrOrStderr(), "no clusters in namespace %s\n", f.ns)
				return nil
			}
			return clusterTable(cmd.OutOrStdout(), cls, output == outWide || all, time.Now())
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	cmd.Flags().BoolVarP(&watchIt, "watch", "w", false, "after the list, print each cluster again when it changes, until Ctrl-C (as kubectl get --watch)")
	return cmd
}

// watchClusters is ls --watch: the list, then each cluster again each time it changes (one
// table row, or the object in -o's format), as kubectl get --watch prints them, until ctx
// ends (Ctrl-C), which is not an error.
func watchClusters(ctx context.Context, f *front, out io.Writer, output outputFormat, all bool) error {
	ns := f.ns
	if all {
		ns = metav1.NamespaceAll
	}
	show := func(items []unstructured.Unstructured, header bool) error {
		cls, err := convert[v1alpha1.Cluster](items)
		if err != nil {
			return err
		}
		if output != outTable && output != outWide {
			for _, c := range cls {
				if _, err := printStructured(out, output, "cluster", clusterNames(c), c); err != nil {
					return err
				}
			}
			return nil
		}
		var b strings.Builder
		if err := clusterTable(&b, cls, output == outWide || all, time.Now()); err != nil {
			return err
		}
		table := b.String()
		if !header {
			_, table, _ = strings.Cut(table, "\n")
		}
		_, err = io.WriteString(out, table)
		return err
	}
	err := f.listWatch(ctx, f.dyn.Resource(clusterprovider.ClustersResource).Namespace(ns), "", func(l *unstructured.UnstructuredList) (bool, error) {
		return false, show(l.Items, true)
	}, func(ev watch.Event) (bool, error) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		return false, show([]unstructured.Unstructured{*u}, false)
	})
	if ctx.Err() != nil {
		return nil // Ctrl-C ends a watch
	}
	return f.explain(err, "cluster", "")
}

func statusCmd(g *globals) *cobra.Command {
	var output outputFormat
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show cluster NAME: phase, URL, conditions and nodes",
		Args:  args(1, 1, "NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			f, err := g.front()
			if err != nil {
				return err
			}
			ctx, stdout := cmd.Context(), cmd.OutOrStdout()
			c, err := f.cluster(ctx, a[0])
			if err != nil {
				return err
			}
			if done, err := printStructured(stdout, output, "cluster", clusterNames(c), c); done {
				return err
			}
			ns, err := f.nodes(ctx, c.Name)
			if err != nil {
				return err
			}
			describeCluster(stdout, c, time.Now())
			if len(ns) > 0 {
				fmt.Fprintln(stdout)
				return nodeTable(stdout, ns, output == outWide, time.Now())
			}
			return nil
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// describeCluster is status's human form.
func describeCluster(w io.Writer, c v1alpha1.Cluster, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	running := c.Spec.Running == nil || *c.Spec.Running
	quota := "none"
	if c.Spec.MaxNodes > 0 {
		quota = fmt.Sprint(c.Spec.MaxNodes)
	}
	fmt.Fprintf(tw, "Cluster:\t%s/%s\n", c.Namespace, c.Name)
	fmt.Fprintf(tw, "Account:\t%s\n", c.Spec.Account)
	fmt.Fprintf(tw, "Phase:\t%s\n", orDash(c.Status.Phase))
	fmt.Fprintf(tw, "URL:\t%s\n", orDash(c.Status.URL))
	fmt.Fprintf(tw, "Running:\t%v\n", running)
	fmt.Fprintf(tw, "Nodes:\t%d (quota %s, %d pods per node)\n", c.Status.Nodes, quota, c.Spec.PodsPerNode)
	fmt.Fprintf(tw, "Instance:\t%s\n", orDash(c.Status.Instance))
	fmt.Fprintf(tw, "Local name:\t%s\n", orDash(c.Annotations[v1alpha1.LocalNameAnnotation]))
	fmt.Fprintf(tw, "Age:\t%s\n", Age(now.Sub(c.CreationTimestamp.Time)))
	if c.Spec.SleepAfter != nil {
		fmt.Fprintf(tw, "Sleep after:\t%s without a request through the front door\n", c.Spec.SleepAfter.Duration)
	}
	if c.Status.LastActive != nil {
		fmt.Fprintf(tw, "Last active:\t%s ago\n", Age(now.Sub(c.Status.LastActive.Time)))
	}
	if c.Status.LastWake != "" {
		fmt.Fprintf(tw, "Last wake:\t%s\n", c.Status.LastWake)
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, "Ready"); cond != nil {
		fmt.Fprintf(tw, "Ready:\t%s %s, %s ago: %s\n", cond.Status, cond.Reason, Age(now.Sub(cond.LastTransitionTime.Time)), cond.Message)
	}
	if c.Status.Phase == v1alpha1.PhaseReady {
		fmt.Fprintf(tw, "Kubeconfig:\tSecret %s/%s-kubeconfig (socialweb-kcp kubeconfig %s)\n", c.Namespace, c.Name, c.Name)
	}
	tw.Flush()
}

func kubeconfigCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "kubeconfig NAME",
		Short: "Print cluster NAME's tenant kubeconfig, or write it to --file (0600)",
		Args:  args(1, 1, "NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			f, err := g.front()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if _, err := f.cluster(ctx, a[0]); err != nil {
				return err
			}
			if file != "" {
				if err := writeKubeconfig(ctx, f, a[0], file); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "kubeconfig written to %s\n", file)
				return nil
			}
			b, err := tenantKubeconfig(ctx, f, a[0])
			if err == nil {
				_, err = cmd.OutOrStdout().Write(b)
			}
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "write it to this file instead of standard output")
	return cmd
}
