package clusterprovider

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"socialweb.computer/kcp/internal/livetest"
)

// A tenant over its object cap gets a clear error on create, and the cluster keeps
// serving reads and updates; once it deletes below the cap it creates again.
func TestATenantAtItsObjectCap(t *testing.T) {
	p, _ := liveProvider(t)
	const limit = 400
	c := upWith(t, p, "capped", NodePolicy{Objects: limit})
	ctx := context.Background()
	livetest.Eventually(t, time.Minute, "the first count", func() (bool, string) { return c.Objects() > 0, "" })
	base := c.Objects()
	if base >= limit {
		t.Fatalf("a fresh cluster already stores %d objects: raise the test's cap over it", base)
	}
	tenant := fastClient(t, c.TenantKubeconfig)
	cms := tenant.CoreV1().ConfigMaps("default")
	var refused error
	created := 0
	livetest.Eventually(t, 2*time.Minute, "a create refused at the cap", func() (bool, string) {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", created)}}, metav1.CreateOptions{})
		if err == nil {
			created++
			return false, fmt.Sprintf("%d created, %d counted", created, c.Objects())
		}
		refused = err
		return true, ""
	})
	t.Logf("a fresh cluster stores %d objects; %d ConfigMaps created, then: %v", base, created, refused)
	if !apierrors.IsInvalid(refused) && !apierrors.IsForbidden(refused) || !strings.Contains(refused.Error(), "cap of 400 stored objects") || !strings.Contains(refused.Error(), "delete objects") {
		t.Errorf("the refusal: %v; want a clear error naming the cap", refused)
	}
	if created < int(limit-base)-1 {
		t.Errorf("refused after %d creates, from %d objects: before the cap of %d", created, base, limit)
	}
	// Reads and updates go on.
	l, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) < created {
		t.Fatalf("list at the cap: %d items, %v", len(l.Items), err)
	}
	cm := l.Items[0]
	cm.Data = map[string]string{"k": "updated at the cap"}
	if _, err := cms.Update(ctx, &cm, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update at the cap: %v", err)
	}
	// Deleting below the cap lifts it.
	for i := 0; i < created; i++ {
		if err := cms.Delete(ctx, fmt.Sprintf("cm-%d", i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	livetest.Eventually(t, time.Minute, "a create once below the cap", func() (bool, string) {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{})
		return err == nil, fmt.Sprintf("%v (%d counted)", err, c.Objects())
	})
}
