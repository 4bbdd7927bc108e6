package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

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
	ul, err := f.dyn.Resource(clusterprovider.NodesResource).Namespace(f.ns).List(ctx, metav1.ListOptions{FieldSelector: nodesOf(cluster)})
	if err != nil {
		return nil, f.explain(err, "node", "")
	}
	all, err := convert[v1alpha1.Node](ul.Items)
	slices.SortFunc(all, func(a, b v1alpha1.Node) int { return strings.Compare(a.Name, b.Name) })
	return all, err
}

// nodesOf is the field selector of cluster's Node objects: the front filters them (the
// Node CRD declares spec.cluster a selectable field).
func nodesOf(cluster string) string {
	return fields.OneTermEqualSelector("spec.cluster", cluster).String()
}

// clusterNamed is the field selector of the Cluster name.
func clusterNamed(name string) string {
	return fields.OneTermEqualSelector("metadata.name", name).String()
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

// follow shows a live display of the objects of res that fieldSelector selects, driven by
// the front's watch (listWatch), until view says done, fails, or timeout passes. view gets
// the objects as last seen, by name, after the listing and after each change, and
// returns the progress of each object it follows; a line is printed, with the time since
// the start, each time one's progress changes. No polling: every change the front reports
// is seen, and a waiting CLI costs it one watch.
func (f *front) follow(ctx context.Context, out io.Writer, timeout time.Duration, what string, res schema.GroupVersionResource, fieldSelector string,
	view func(map[string]*unstructured.Unstructured) (map[string]progress, bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	shown := map[string]progress{}
	var objs map[string]*unstructured.Unstructured
	step := func() (bool, error) {
		now, done, err := view(objs)
		for _, name := range slices.Sorted(maps.Keys(now)) {
			if p := now[name]; shown[name] != p {
				shown[name] = p
				fmt.Fprintln(out, p.line(time.Since(t0)))
			}
		}
		return done, err
	}
	err := f.listWatch(ctx, f.dyn.Resource(res).Namespace(f.ns), fieldSelector, func(l *unstructured.UnstructuredList) (bool, error) {
		objs = map[string]*unstructured.Unstructured{}
		for i := range l.Items {
			objs[l.Items[i].GetName()] = &l.Items[i]
		}
		return step()
	}, func(ev watch.Event) (bool, error) {
		apply(objs, ev)
		return step()
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return timeoutError{what: what, timeout: timeout}
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return f.explain(err, strings.TrimSuffix(res.Resource, "s"), "")
}

// apply is ev applied to objs, by name.
func apply(objs map[string]*unstructured.Unstructured, ev watch.Event) {
	if u, ok := ev.Object.(*unstructured.Unstructured); ok {
		if ev.Type == watch.Deleted {
			delete(objs, u.GetName())
		} else {
			objs[u.GetName()] = u
		}
	}
}

// listWatch lists the objects of client that fieldSelector selects and hands the list to
// onList, then watches from the list's resourceVersion (client-go's RetryWatcher, which
// resumes a dropped watch where it was) and hands each change to onEvent, in order; when
// the front answers 410 Gone (it compacted past that version) it lists again. It returns
// when onList or onEvent says done or fails, or ctx ends (ctx's error).
func (f *front) listWatch(ctx context.Context, client dynamic.ResourceInterface, fieldSelector string,
	onList func(*unstructured.UnstructuredList) (bool, error), onEvent func(watch.Event) (bool, error)) error {
	for {
		list, err := client.List(ctx, metav1.ListOptions{FieldSelector: fieldSelector})
		if err != nil {
			return err
		}
		if done, err := onList(list); done || err != nil {
			return err
		}
		w, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &cache.ListWatch{
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = fieldSelector
				return client.Watch(ctx, o)
			},
		})
		if err != nil {
			return err
		}
		relist, done, err := watchEvents(w, onEvent)
		w.Stop()
		switch {
		case done || err != nil:
			return err
		case !relist:
			return ctx.Err() // the watch ended with the context
		}
	}
}

// watchEvents hands w's changes to onEvent until it says done or fails, the front answers
// 410 Gone (relist), or w ends.
func watchEvents(w watch.Interface, onEvent func(watch.Event) (bool, error)) (relist, done bool, err error) {
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				return true, false, nil
			}
			return false, false, err
		case watch.Added, watch.Modified, watch.Deleted:
			if done, err := onEvent(ev); done || err != nil {
				return false, done, err
			}
		}
	}
	return false, false, nil
}
