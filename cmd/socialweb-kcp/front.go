package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/clusterprovider"
)

// front is the provider's front API, in one namespace. Its errors come explained.
type front struct {
	dyn  dynamic.Interface
	core kubernetes.Interface
	ns   string
	host string
}

func (g *globals) front() (*front, error) {
	if _, err := os.Stat(g.kubeconfig); err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w; start the provider first (make run, or socialweb-clusterprovider serve), which writes it, or give the front's kubeconfig", g.kubeconfig, errors.Unwrap(err))
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", g.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", g.kubeconfig, err)
	}
	cfg.Timeout = 30 * time.Second
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &front{dyn: dyn, core: core, ns: g.namespace, host: cfg.Host}, nil
}

// explained is the front's error told as what to do about it; errors.Is and apierrors
// still see the original.
type explained struct {
	msg string
	err error
}

func (e explained) Error() string { return e.msg }
func (e explained) Unwrap() error { return e.err }

// explain turns the front's errors into what to do about them.
func (f *front) explain(err error, kind, name string) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err) && name != "":
		return explained{fmt.Sprintf("%s %s not found in namespace %s (socialweb-kcp ls -A lists every cluster)", kind, name, f.ns), err}
	case apierrors.IsNotFound(err):
		return explained{fmt.Sprintf("the front at %s does not serve %ss: is it the provider's front? (%v)", f.host, kind, err), err}
	case utilnet.IsConnectionRefused(err):
		return explained{fmt.Sprintf("the front at %s does not answer: is the provider running (make run, or socialweb-clusterprovider serve)? (%v)", f.host, err), err}
	}
	return err // the front's own message (Invalid names the field)
}

func (f *front) cluster(ctx context.Context, name string) (v1alpha1.Cluster, error) {
	var c v1alpha1.Cluster
	u, err := f.dyn.Resource(clusterprovider.ClustersResource).Namespace(f.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return c, f.explain(err, "cluster", name)
	}
	return c, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c)
}

func (f *front) clusters(ctx context.Context, allNamespaces bool) ([]v1alpha1.Cluster, error) {
	ns := f.ns
	if allNamespaces {
		ns = metav1.NamespaceAll
	}
	ul, err := f.dyn.Resource(clusterprovider.ClustersResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, f.explain(err, "cluster", "")
	}
	return convert[v1alpha1.Cluster](ul.Items)
}

// nodes are the Node objects of cluster, by name.
func (f *front) nodes(ctx context.Context, cluster string) ([]v1alpha1.Node, error) {
	ul, err := f.dyn.Resource(clusterprovider.NodesResource).Namespace(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, f.explain(err, "node", "")
	}
	all, err := convert[v1alpha1.Node](ul.Items)
	all = slices.DeleteFunc(all, func(n v1alpha1.Node) bool { return n.Spec.Cluster != cluster })
	slices.SortFunc(all, func(a, b v1alpha1.Node) int { return strings.Compare(a.Name, b.Name) })
	return all, err
}

func convert[T any](items []unstructured.Unstructured) ([]T, error) {
	out := make([]T, len(items))
	for i := range items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(items[i].Object, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// create declares obj (a Cluster or a Node) on the front.
func (f *front) create(ctx context.Context, obj any) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	res := clusterprovider.ClustersResource
	if _, ok := obj.(*v1alpha1.Node); ok {
		res = clusterprovider.NodesResource
	}
	_, err = f.dyn.Resource(res).Namespace(f.ns).Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{})
	return f.explain(err, strings.ToLower(res.Resource[:len(res.Resource)-1]), "")
}

// setRunning sets the Cluster's spec.running: false parks it, true brings it back.
func (f *front) setRunning(ctx context.Context, name string, running bool) error {
	patch := fmt.Appendf(nil, `{"spec":{"running":%t}}`, running)
	_, err := f.dyn.Resource(clusterprovider.ClustersResource).Namespace(f.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return f.explain(err, "cluster", name)
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: kind}
}

// watch shows a live display until observe says done, fails, or timeout passes: each
// time what the provider reports of an object changes, one line with the time since the
// start. observe returns the progress of every object it watches, by name.
func watch(ctx context.Context, out io.Writer, timeout time.Duration, what string, observe func(context.Context) (map[string]progress, bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	shown := map[string]progress{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		now, done, err := observe(ctx)
		names := make([]string, 0, len(now))
		for name := range now {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			if p := now[name]; shown[name] != p {
				shown[name] = p
				fmt.Fprintln(out, p.line(time.Since(t0)))
			}
		}
		if done {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return timeoutError{what: what, timeout: timeout}
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}
