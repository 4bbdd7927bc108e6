package cloudprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	"socialweb.computer/kcp/internal/cloudprovider/contract"
)

// ReasonQuotaExceeded is the reason of the Event on a Node the quota keeps uninitialized.
const ReasonQuotaExceeded = "NodeQuotaExceeded"

// ErrQuotaExceeded: the cluster already has MaxNodes initialized Nodes.
var ErrQuotaExceeded = errors.New("node quota exceeded")

// Quota keeps the number of initialized Nodes at or below Max. A Node holds a place once
// it is initialized, or once this process has admitted it (the cache may not show its
// taint gone yet); a Node that is deleted gives its place back.
type Quota struct {
	Cluster  string
	Max      int
	Nodes    corelisters.NodeLister
	Recorder record.EventRecorder

	mu       sync.Mutex
	admitted map[string]bool
}

// Admit lets node be initialized, or refuses it with an Event on the Node saying why.
func (q *Quota) Admit(_ context.Context, node *corev1.Node) error {
	if q.Max == 0 {
		return nil
	}
	if q.Nodes == nil {
		return errors.New("node quota: the Node informer is not set; refusing rather than guessing")
	}
	nodes, err := q.Nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("node quota: list Nodes: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.admitted == nil {
		q.admitted = map[string]bool{}
	}
	holders := QuotaHolders(nodes, q.admitted)
	if !Admits(node.Name, holders, q.Max) {
		msg := fmt.Sprintf("cluster %s allows %d initialized nodes (%s) and %d hold a place; %s stays uninitialized until one leaves",
			q.Cluster, q.Max, contract.EnvMaxNodes, len(holders), node.Name)
		if q.Recorder != nil {
			q.Recorder.Event(node, corev1.EventTypeWarning, ReasonQuotaExceeded, msg)
		}
		return fmt.Errorf("%w: %s", ErrQuotaExceeded, msg)
	}
	q.admitted[node.Name] = true
	return nil
}

// QuotaHolders are the Nodes that hold a place: initialized ones, and admitted ones that
// still exist. It also forgets admitted Nodes that are gone.
func QuotaHolders(nodes []*corev1.Node, admitted map[string]bool) []string {
	exists := map[string]bool{}
	var out []string
	for _, n := range nodes {
		exists[n.Name] = true
		if !HasUninitializedTaint(n) || admitted[n.Name] {
			out = append(out, n.Name)
		}
	}
	for name := range admitted {
		if !exists[name] {
			delete(admitted, name)
		}
	}
	slices.Sort(out)
	return out
}

// Admits decides: a Node that holds a place keeps it; another gets one while fewer than
// max are held. max 0 is no quota.
func Admits(name string, holders []string, max int) bool {
	return max == 0 || slices.Contains(holders, name) || len(holders) < max
}
