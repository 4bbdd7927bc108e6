package clusterprovider

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/internal/procgroup"
)

// pollInterval is how often a gate re-checks its condition.
const pollInterval = 50 * time.Millisecond

// permanentError ends a poll at once: waiting longer cannot help.
type permanentError struct{ error }

// poll calls check until it returns true or a permanentError, or ctx ends; the last
// transient error is reported with the deadline so a failed gate says what it last saw.
func poll(ctx context.Context, what string, check func(ctx context.Context) (bool, error)) error {
	var last error
	for {
		ok, err := check(ctx)
		if ok {
			return nil
		}
		var stop permanentError
		if errors.As(err, &stop) {
			return fmt.Errorf("%s: %w", what, stop.error)
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// all runs gates in order; the step is ready when every one has passed.
func all(gates ...procgroup.Gate) procgroup.Gate {
	return func(ctx context.Context) error {
		for _, g := range gates {
			if err := g(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}

// waitDial is ready once network/address accepts a connection.
func waitDial(network, address string) procgroup.Gate {
	return func(ctx context.Context) error {
		return poll(ctx, "dial "+network+" "+address, func(ctx context.Context) (bool, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, address)
			if err != nil {
				return false, err
			}
			c.Close()
			return true, nil
		})
	}
}

// waitReadyz is ready once the apiserver's /readyz answers 200.
func waitReadyz(client kubernetes.Interface) procgroup.Gate {
	return func(ctx context.Context) error {
		return poll(ctx, "apiserver /readyz", func(ctx context.Context) (bool, error) {
			var code int
			res := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code)
			if code == 200 {
				return true, nil
			}
			if err := res.Error(); err != nil {
				return false, err
			}
			return false, fmt.Errorf("/readyz answered %d", code)
		})
	}
}

// controllersProbeLabel and controllersProbePrefix mark the probe ClusterRoles of
// waitControllers (and the probe namespaces of its earlier form).
const (
	controllersProbeLabel  = "socialweb.computer/controllers-probe"
	controllersProbePrefix = "socialweb-controllers-probe-"
)

// waitControllers proves the controller-manager's controllers run now, not that they ran
// once: its clusterrole-aggregation controller fills a fresh probe ClusterRole that
// aggregates the bootstrap "view" rules. The probe is cluster-scoped and removed by the
// gate itself, at once, so it leaves nothing in the tenant's API. (A probe namespace, the
// earlier proof, stayed Terminating for at least 5 s after the gate passed: the namespace
// controller waits that long before it empties one, and a tenant's first "kubectl get ns"
// showed it.)
func waitControllers(client kubernetes.Interface) procgroup.Gate {
	return func(ctx context.Context) error {
		roles := client.RbacV1().ClusterRoles()
		cleanup := func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// Only the gate's own probes: its label and its name, never a tenant's role
			// that happens to carry the label.
			list, err := roles.List(dctx, metav1.ListOptions{LabelSelector: controllersProbeLabel})
			if err != nil {
				return
			}
			for _, r := range list.Items {
				if strings.HasPrefix(r.Name, controllersProbePrefix) {
					_ = roles.Delete(dctx, r.Name, metav1.DeleteOptions{})
				}
			}
		}
		cleanup() // probes an interrupted earlier run left
		// And probe namespaces, of the same label, an interrupted run of the earlier gate
		// left (it probed with a namespace): gone in the background, once.
		nss := client.CoreV1().Namespaces()
		if list, err := nss.List(ctx, metav1.ListOptions{LabelSelector: controllersProbeLabel}); err == nil {
			for _, ns := range list.Items {
				if ns.DeletionTimestamp == nil && strings.HasPrefix(ns.Name, controllersProbePrefix) {
					_ = nss.Delete(ctx, ns.Name, metav1.DeleteOptions{})
				}
			}
		}
		defer cleanup()
		probe := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{GenerateName: controllersProbePrefix, Labels: map[string]string{controllersProbeLabel: "true"}},
			AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
				{MatchLabels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
			}},
		}
		var name string
		return poll(ctx, "controller-manager: a probe ClusterRole aggregated", func(ctx context.Context) (bool, error) {
			if name == "" {
				r, err := roles.Create(ctx, probe, metav1.CreateOptions{})
				if err != nil {
					return false, err
				}
				name = r.Name
			}
			r, err := roles.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				name = ""
				return false, err
			}
			if err != nil {
				return false, err
			}
			if len(r.Rules) == 0 {
				return false, errors.New("probe ClusterRole not yet aggregated")
			}
			return true, nil
		})
	}
}

// schedulerProbeLabel marks the probe pods of waitScheduler.
const schedulerProbeLabel = "socialweb.computer/scheduler-probe"

// waitScheduler proves the scheduler schedules: a probe pod no node can take is marked
// Unschedulable by it, then the probe is deleted. It works at zero nodes and at many.
func waitScheduler(client kubernetes.Interface) procgroup.Gate {
	return func(ctx context.Context) error {
		pods := client.CoreV1().Pods(metav1.NamespaceSystem)
		cleanup := func() {
			// A probe left by an interrupted earlier run is removed too.
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			zero := int64(0)
			_ = pods.DeleteCollection(dctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{LabelSelector: schedulerProbeLabel})
		}
		cleanup()
		defer cleanup()
		no := false
		probe := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "socialweb-scheduler-probe-", Labels: map[string]string{schedulerProbeLabel: "true"}},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: &no,
				NodeSelector:                 map[string]string{schedulerProbeLabel: "no-node-has-this"},
				Containers:                   []corev1.Container{{Name: "probe", Image: "registry.k8s.io/pause:3.10"}},
			},
		}
		var name string
		return poll(ctx, "scheduler: probe pod marked Unschedulable", func(ctx context.Context) (bool, error) {
			if name == "" {
				p, err := pods.Create(ctx, probe, metav1.CreateOptions{})
				if err != nil {
					return false, err // e.g. the kube-system default ServiceAccount is not there yet
				}
				name = p.Name
			}
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				name = ""
				return false, err
			}
			if err != nil {
				return false, err
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return true, nil
				}
			}
			return false, errors.New("probe pod not yet looked at by the scheduler")
		})
	}
}
