package clusterprovider

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// drain cordons node and evicts its Pods through the Eviction API (PodDisruptionBudgets
// hold), retrying until none is left or ctx ends. DaemonSet Pods and mirror Pods stay, as
// kubectl drain leaves them.
func (c *Cluster) drain(ctx context.Context, node string) error {
	_, err := c.admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cordon: %w", err)
	}
	return poll(ctx, "evict the Pods of "+node, func(ctx context.Context) (bool, error) {
		pods, err := c.admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, err
		}
		left := 0
		for _, p := range pods.Items {
			if !Evictable(&p) {
				continue
			}
			left++
			if p.DeletionTimestamp != nil {
				continue
			}
			err := c.admin.CoreV1().Pods(p.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsTooManyRequests(err) {
				return false, fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
		if left > 0 {
			return false, fmt.Errorf("%d pods still on %s", left, node)
		}
		return true, nil
	})
}

// Evictable reports whether drain evicts p: not a mirror Pod, not a DaemonSet's, not done.
func Evictable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return false
		}
	}
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}
