package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/instancesnapshot"
	"socialweb.computer/kcp/internal/nodeprovider"
)

func nodesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "Add, remove and list a cluster's nodes (simulated guests, initialized by its CCM)",
	}
	var w waitFlags
	var guest string
	add := &cobra.Command{
		Use:     "add NAME [COUNT]",
		Short:   "Add COUNT (default 1) nodes to cluster NAME and wait until each is Ready",
		Example: "  socialweb-kcp nodes add demo 2\n  socialweb-kcp nodes add demo 2 --guest real",
		Args: cobra.MatchAll(args(1, 2, "NAME [COUNT]"), func(_ *cobra.Command, a []string) error {
			_, err := nodeCount(a)
			return err
		}),
		RunE: func(cmd *cobra.Command, a []string) error {
			count, err := nodeCount(a)
			if err != nil {
				return err
			}
			f, err := g.front()
			if err != nil {
				return err
			}
			if _, err := f.cluster(cmd.Context(), a[0]); err != nil {
				return err
			}
			return addNodes(cmd.Context(), f, cmd.OutOrStdout(), a[0], count, guest, w)
		},
	}
	addWaitFlags(add, &w, "every node is Ready")
	add.Flags().StringVar(&guest, "guest", "", "kind of guest: kwok (simulated: nothing runs) or real (containerd and a kubelet on the provider's host, running real containers); unset: the cluster's spec.guest, else kwok")
	var rw waitFlags
	rm := &cobra.Command{
		Use:     "rm NAME ID...",
		Short:   "Remove nodes from cluster NAME: each is drained, its guest deleted, its Node gone",
		Example: "  socialweb-kcp nodes rm demo n2",
		Args:    args(2, -1, "NAME ID..."),
		RunE: func(cmd *cobra.Command, a []string) error {
			f, err := g.front()
			if err != nil {
				return err
			}
			return removeNodes(cmd.Context(), f, cmd.OutOrStdout(), a[0], a[1:], rw)
		},
	}
	addWaitFlags(rm, &rw, "every node is gone")
	var output outputFormat
	ls := &cobra.Command{
		Use:   "ls NAME",
		Short: "List cluster NAME's nodes: NAME ID PHASE PROVIDER-ID AGE",
		Args:  args(1, 1, "NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			f, err := g.front()
			if err != nil {
				return err
			}
			if _, err := f.cluster(cmd.Context(), a[0]); err != nil {
				return err
			}
			ns, err := f.nodes(cmd.Context(), a[0])
			if err != nil {
				return err
			}
			if done, err := printStructured(cmd.OutOrStdout(), output, "node", nodeNames(ns), list(ns)); done {
				return err
			}
			if len(ns) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "cluster %s has no nodes (socialweb-kcp nodes add %s)\n", a[0], a[0])
				return nil
			}
			return nodeTable(cmd.OutOrStdout(), ns, output == outWide, time.Now())
		},
	}
	addOutputFlag(ls, &output)
	cmd.AddCommand(add, rm, ls)
	return cmd
}

// nodeCount is nodes add's COUNT: 1 when absent, else a number from 1 to 100.
func nodeCount(a []string) (int, error) {
	if len(a) < 2 {
		return 1, nil
	}
	n, err := strconv.Atoi(a[1])
	if err != nil || n < 1 || n > 100 {
		return 0, usageError{fmt.Errorf("COUNT %q: want a number from 1 to 100", a[1])}
	}
	return n, nil
}

// addNodes declares count Node objects for cluster under the next free ids and, with
// --wait, shows each one's progress until all are Ready.
func addNodes(ctx context.Context, f *front, out io.Writer, cluster string, count int, guest string, w waitFlags) error {
	if guest != "" && guest != nodeprovider.KindKwok && guest != nodeprovider.KindReal {
		return fmt.Errorf("--guest %q: want %s or %s", guest, nodeprovider.KindKwok, nodeprovider.KindReal)
	}
	have, err := f.nodes(ctx, cluster)
	if err != nil {
		return err
	}
	var taken []instancesnapshot.Instance
	for _, n := range have {
		taken = append(taken, instancesnapshot.Instance{NodeID: n.Spec.NodeID})
	}
	var names []string
	// The front decides who gets an id: a name another client created first since the
	// listing is AlreadyExists, and the next free id is tried.
	for tries := 0; len(names) < count; tries++ {
		id := clusterprovider.NextNodeIDs(taken, 1)[0]
		taken = append(taken, instancesnapshot.Instance{NodeID: id}) // ours now, or another's
		name, err := nodeprovider.NodeName(cluster, id)
		if err != nil {
			return err
		}
		n := &v1alpha1.Node{TypeMeta: typeMeta("Node"), ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: v1alpha1.NodeSpec{Cluster: cluster, NodeID: id, Guest: guest}}
		if err := f.create(ctx, n); apierrors.IsAlreadyExists(err) && tries < 10 {
			continue
		} else if err != nil {
			return err
		}
		names = append(names, name)
		fmt.Fprintf(out, "node %s declared\n", name)
	}
	if !w.wait {
		return nil
	}
	err = f.follow(ctx, out, w.timeout, fmt.Sprintf("nodes %v Ready", names), clusterprovider.NodesResource, nodesOf(cluster), func(objs map[string]*unstructured.Unstructured) (map[string]progress, bool, error) {
		now, ready := map[string]progress{}, 0
		for _, name := range names {
			u, ok := objs[name]
			if !ok {
				continue // deleted by someone else since: the wait runs out
			}
			var n v1alpha1.Node
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &n); err != nil {
				return nil, false, err
			}
			now[n.Name] = nodeProgress(n)
			if n.Status.Phase == v1alpha1.NodePhaseReady {
				ready++
			}
		}
		return now, ready == len(names), nil
	})
	if err == nil {
		fmt.Fprintf(out, "Ready in cluster %s: %s\n", cluster, strings.Join(names, ", "))
	}
	return err
}

// removeNodes deletes the Node objects of ids and, with --wait, shows their teardown.
func removeNodes(ctx context.Context, f *front, out io.Writer, cluster string, ids []string, w waitFlags) error {
	have, err := f.nodes(ctx, cluster)
	if err != nil {
		return err
	}
	var names []string
	for _, id := range ids {
		i := slices.IndexFunc(have, func(n v1alpha1.Node) bool { return n.Spec.NodeID == id })
		if i < 0 {
			return fmt.Errorf("cluster %s has no node %q (socialweb-kcp nodes ls %s); nothing removed", cluster, id, cluster)
		}
		names = append(names, have[i].Name)
	}
	for _, name := range names {
		err := f.dyn.Resource(clusterprovider.NodesResource).Namespace(f.ns).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return f.explain(err, "node", name)
		}
		fmt.Fprintf(out, "node %s: removal requested\n", name)
	}
	if !w.wait {
		return nil
	}
	err = f.follow(ctx, out, w.timeout, fmt.Sprintf("nodes %v gone", names), clusterprovider.NodesResource, nodesOf(cluster), func(objs map[string]*unstructured.Unstructured) (map[string]progress, bool, error) {
		now, left := map[string]progress{}, 0
		for _, name := range names {
			u, ok := objs[name]
			if !ok {
				now[name] = progress{Name: name, Phase: "Deleted", Message: "drained, guest deleted, Node gone"}
				continue
			}
			var n v1alpha1.Node
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &n); err != nil {
				return nil, false, err
			}
			now[name] = nodeProgress(n)
			left++
		}
		return now, left == 0, nil
	})
	if err == nil {
		fmt.Fprintf(out, "removed from cluster %s: %s\n", cluster, strings.Join(names, ", "))
	}
	return err
}
