package clusterprovider

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/frontevents"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/portallocator"
)

// What kubectl describe cluster shows an operator: a bring-up that fails records a Warning
// Event on its Cluster naming the cause and what to do; once the cause is gone the retry's
// bring-up records Normal Events in order, Ready last.
func TestEventsOnTheFront(t *testing.T) {
	fp, _ := liveProvider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := crdFront(ctx, t, fp, "eventsfront")
	dyn, core := dynamic.NewForConfigOrDie(cfg), kubernetes.NewForConfigOrDie(cfg)

	// The provider's one port is taken by someone else: its bring-up cannot lease a port.
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	port := squatter.Addr().(*net.TCPAddr).Port
	rec := frontevents.NewRecorder(core, "socialweb-clusterprovider", "test")
	defer rec.Shutdown()
	loop := &Loop{Front: dyn, Core: core, Instance: "test", Events: rec, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	// As serve wires it: the bring-up's steps reach the loop, which writes them to status.
	p, err := New(Config{DataRoot: livetest.DataRoot(t), BinDir: binDir(t), Ports: portallocator.Range{First: port, Last: port}, Grace: 10 * time.Second, OnEvent: loop.StepEvent})
	if err != nil {
		t.Fatal(err)
	}
	loop.P = p
	loopCtx, stopLoop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(loopCtx) }()
	defer func() { stopLoop(); <-done }()

	if _, err := dyn.Resource(ClustersResource).Namespace("default").Create(ctx, v1alpha1.Object("Cluster", "starved", map[string]any{"account": "acme"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	events := func() []corev1.Event {
		l, err := core.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Cluster,involvedObject.name=starved"})
		if err != nil {
			t.Fatal(err)
		}
		// Oldest first: the recorder's names end in the creation time in hex nanoseconds.
		slices.SortFunc(l.Items, func(a, b corev1.Event) int {
			if c := a.FirstTimestamp.Compare(b.FirstTimestamp.Time); c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
		return l.Items
	}
	show := func(es []corev1.Event) string {
		var b strings.Builder
		for _, e := range es {
			fmt.Fprintf(&b, "\n  %s %s x%d: %s", e.Type, e.Reason, e.Count, e.Message)
		}
		return b.String()
	}
	eventually(t, 2*time.Minute, "a Warning BringUpFailed Event naming the port", func() (bool, string) {
		es := events()
		return slices.ContainsFunc(es, func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && e.Reason == "BringUpFailed" && strings.Contains(e.Message, "widen the range") && strings.Contains(e.Message, "socialweb-kcp status starved")
		}), show(es)
	})

	squatter.Close() // the cause is gone: the next attempt, after its backoff, comes up
	eventually(t, 3*time.Minute, "a Normal Ready Event after the failure", func() (bool, string) {
		es := events()
		return len(es) > 0 && es[len(es)-1].Reason == "Ready", show(es)
	})
	es := events()
	t.Logf("Events of Cluster starved:%s", show(es))
	var reasons []string
	for _, e := range es {
		if e.Source.Component != "socialweb-clusterprovider" || e.InvolvedObject.APIVersion != v1alpha1.APIVersion {
			t.Errorf("Event %s: source %v, object %v", e.Name, e.Source, e.InvolvedObject)
		}
		if e.Type == corev1.EventTypeNormal || e.Reason == "BringUpFailed" {
			reasons = append(reasons, e.Reason)
		}
	}
	// Each attempt: BringingUp, then its failure or Ready (repeats of one reason and message
	// are one Event with a count, as client-go's recorder aggregates them).
	up, failed, last := slices.Index(reasons, "BringingUp"), slices.Index(reasons, "BringUpFailed"), len(reasons)-1
	if up < 0 || failed < up || reasons[last] != "Ready" || !slices.Contains(reasons[failed:last], "BringingUp") {
		t.Errorf("Events out of order: %v", reasons)
	}
}
