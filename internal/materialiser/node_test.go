package materialiser

import (
	"slices"
	"testing"
)

func TestNodeTransitions(t *testing.T) {
	up := ObservedNode{HasFinalizer: true, Cluster: "demo", ClusterExists: true, ClusterRuns: true}
	with := func(f func(*ObservedNode)) ObservedNode { o := up; f(&o); return o }
	for _, c := range []struct {
		name  string
		o     ObservedNode
		phase NodePhase
		ops   []Op
	}{
		{"new Node: adopted first", with(func(o *ObservedNode) { o.HasFinalizer = false }), NodePending, []Op{OpAdoptNode}},
		{"no such cluster", with(func(o *ObservedNode) { o.HasFinalizer, o.ClusterExists, o.ClusterRuns = false, false, false }), NodePending, nil},
		{"cluster not up yet", with(func(o *ObservedNode) { o.ClusterRuns = false }), NodePending, nil},
		{"cluster up, guest unlisted", up, NodeJoining, []Op{OpAddGuest}},
		{"listed, not registered yet: looks again", with(func(o *ObservedNode) { o.Listed = true }), NodeJoining, nil},
		{"registered, not initialized: looks again", with(func(o *ObservedNode) { o.Listed, o.Registered = true, true }), NodeJoining, nil},
		{"registered, over the quota: looks again, says why", with(func(o *ObservedNode) { o.Listed, o.Registered, o.OverQuota = true, true, true }), NodeJoining, nil},
		{"listed and Ready", with(func(o *ObservedNode) { o.Listed, o.Registered, o.Ready = true, true, true }), NodeReady, nil},
		{"cluster being deleted: no new guest", with(func(o *ObservedNode) { o.ClusterDeleting = true }), NodePending, nil},
		{"deleted, listed: removed", with(func(o *ObservedNode) { o.Deleting, o.Listed, o.Ready = true, true, true }), NodeRemoving, []Op{OpRemoveGuest}},
		{"deleted, unlisted: released", with(func(o *ObservedNode) { o.Deleting = true }), NodeRemoving, []Op{OpReleaseNode}},
		{"deleted, cluster parked: waits", with(func(o *ObservedNode) { o.Deleting, o.ClusterRuns = true, false }), NodeRemoving, nil},
		{"deleted with its cluster", with(func(o *ObservedNode) { o.Deleting, o.ClusterDeleting, o.Listed = true, true, true }), NodeRemoving, []Op{OpReleaseNode}},
		{"deleted, cluster gone", with(func(o *ObservedNode) { o.Deleting, o.ClusterExists, o.ClusterRuns = true, false, false }), NodeRemoving, []Op{OpReleaseNode}},
		{"deleted, finalizer gone", with(func(o *ObservedNode) { o.Deleting, o.HasFinalizer = true, false }), NodeRemoving, nil},
	} {
		r := ReconcileNode(c.o)
		if r.Phase != c.phase || !slices.Equal(r.Ops, c.ops) {
			t.Errorf("%s: %s %v; want %s %v", c.name, r.Phase, r.Ops, c.phase, c.ops)
		}
		if r.Reason == "" {
			t.Errorf("%s: no reason", c.name)
		}
	}
}

// TestEveryNodeObservationKeepsTheRules checks all 512 observations against the rules a
// guest's lifecycle must keep, whatever the decision's details.
func TestEveryNodeObservationKeepsTheRules(t *testing.T) {
	for bits := range 1 << 9 {
		b := func(i int) bool { return bits&(1<<i) != 0 }
		o := ObservedNode{Deleting: b(0), HasFinalizer: b(1), ClusterExists: b(2), ClusterDeleting: b(3), ClusterRuns: b(4), Listed: b(5), Ready: b(6), Registered: b(7), OverQuota: b(8), Cluster: "c"}
		r := ReconcileNode(o)
		has := func(op Op) bool { return slices.Contains(r.Ops, op) }
		switch {
		case has(OpAddGuest) && (o.Deleting || !o.HasFinalizer || !o.ClusterRuns || o.ClusterDeleting || !o.ClusterExists):
			t.Errorf("%+v: a guest added outside a running, live cluster or before the finalizer", o)
		case has(OpRemoveGuest) && !(o.Deleting && o.ClusterRuns && o.Listed):
			t.Errorf("%+v: a guest removed that was not asked to go", o)
		case has(OpReleaseNode) && (!o.Deleting || !o.HasFinalizer || o.ClusterRuns && o.Listed && o.ClusterExists && !o.ClusterDeleting):
			t.Errorf("%+v: the finalizer released while its guest is still listed in a live cluster", o)
		case o.Deleting && r.Phase != NodeRemoving, !o.Deleting && r.Phase == NodeRemoving:
			t.Errorf("%+v: phase %s", o, r.Phase)
		case r.Phase == NodeReady && !(o.Listed && o.Ready && o.ClusterRuns):
			t.Errorf("%+v: Ready without a listed, Ready guest", o)
		case len(r.Ops) > 1:
			t.Errorf("%+v: %v: one operation per pass", o, r.Ops)
		case r.Phase == NodeJoining && len(r.Ops) == 0 && r.Requeue == 0:
			t.Errorf("%+v: Joining with nothing to do and no look again: it would wait for an event that may never come", o)
		}
	}
}
