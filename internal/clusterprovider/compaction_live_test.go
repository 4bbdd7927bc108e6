package clusterprovider

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"socialweb.computer/kcp/internal/livetest"
)

// A tenant's datastore forgets its history as an etcd under a kube-apiserver does: once
// the apiserver has compacted past a list's revision, the list's continue token gets 410
// Gone, and the objects themselves are all still there. (kine's own default kept the last
// 1,000 revisions whatever the apiserver asked, so a quiet tenant's tokens never expired.)
func TestAnOldContinueTokenIsGoneAfterCompaction(t *testing.T) {
	p, _ := liveProvider(t, func(c *Config) { c.CompactionInterval = 2 * time.Second })
	c := up(t, p, "compact")
	ctx := context.Background()
	cms := clientFor(t, c.TenantKubeconfig).CoreV1().ConfigMaps("default")
	create := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%02d", prefix, i), Labels: map[string]string{"compaction": "probe"},
			}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	create("before", 12)
	page, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "compaction=probe", Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if page.Continue == "" {
		t.Fatalf("a list of 12 with limit 5 gave no continue token (%d items)", len(page.Items))
	}
	create("after", 3) // history past the token's revision, for a compaction to drop

	livetest.Eventually(t, 2*time.Minute, "the old continue token answered 410 Gone", func() (bool, string) {
		_, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "compaction=probe", Limit: 5, Continue: page.Continue})
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return true, ""
		}
		// Writes keep going, as a live tenant's do, so that each compaction has history to drop.
		_, werr := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "tick-"}}, metav1.CreateOptions{})
		return false, fmt.Sprintf("continue: %v; write: %v", err, werr)
	})
	all, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "compaction=probe"})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != 15 {
		t.Fatalf("after compaction a fresh list has %d of the 15 ConfigMaps", len(all.Items))
	}
	// What compaction cost, as kine reports each pass.
	log, _ := os.ReadFile(c.Spec.Layout().Log("kine"))
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "COMPACT deleted") {
			t.Log(strings.TrimSpace(line))
		}
	}
}
