package clusterprovider

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"socialweb.computer/kcp/internal/auditlog"
	"socialweb.computer/kcp/internal/livetest"
)

// Each tenant apiserver writes its own audit log: a tenant's write appears in its log
// with its body, not in another tenant's; a Secret's value appears in none.
func TestEachTenantHasItsOwnAuditLog(t *testing.T) {
	p, _ := liveProvider(t)
	a, b := up(t, p, "aud-a"), up(t, p, "aud-b")
	ctx := context.Background()
	tenant := clientFor(t, a.TenantKubeconfig)
	if _, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "audited-write"}, Data: map[string]string{"k": "visible-in-the-audit"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "audited-secret"}, StringData: map[string]string{"k": "socialweb-audit-secret-marker"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	read := func(c *Cluster) string {
		b, _ := os.ReadFile(c.Spec.Layout().AuditLog())
		return string(b)
	}
	livetest.Eventually(t, time.Minute, "the write and the Secret's creation in a's audit log", func() (bool, string) {
		log := read(a)
		return strings.Contains(log, "visible-in-the-audit") && strings.Contains(log, `"name":"audited-secret"`), fmt.Sprintf("%d bytes", len(log))
	})
	events, err := auditlog.Recent(a.Spec.Layout().AuditLog(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(events, func(e auditlog.Event) bool {
		return e.Verb == "create" && e.Resource == "configmaps" && e.Name == "audited-write" && e.Code == 201 && e.User != ""
	}) {
		t.Errorf("a's recent events lack the ConfigMap's creation (%d events)", len(events))
	}
	for _, c := range []*Cluster{a, b} {
		if strings.Contains(read(c), "socialweb-audit-secret-marker") {
			t.Errorf("%s's audit log holds a Secret's value", c.Name)
		}
	}
	if log := read(b); strings.Contains(log, "audited-write") || !strings.Contains(log, `"kind":"Event"`) {
		t.Errorf("b's audit log: a's write in it, or no events of its own (%d bytes)", len(log))
	}
	if info, err := os.Stat(a.Spec.Layout().AuditLog()); err != nil {
		t.Error(err)
	} else if info.Mode().Perm() != 0o600 {
		t.Errorf("a's audit log has mode %v, want 0600", info.Mode().Perm())
	}
}
