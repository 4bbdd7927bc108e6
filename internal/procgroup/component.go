// Package procgroup runs a tenant cluster's components as one supervised group: started in
// a fixed order, each behind a readiness gate, and reaped in the reverse order.
package procgroup

import "fmt"

// Component is one member of a cluster's process group. Its number names its record in a
// group's RecordDir, so a number, once given, is never given to another member: a new one
// is appended. Its start order is Order; Reap walks it backwards (invariant 4).
type Component int

const (
	ComponentPostgres Component = iota + 1
	// ComponentOpenBao keeps its place for when a bao binary can be had; nothing spawns it here.
	ComponentOpenBao
	ComponentKine
	// ComponentK3s is the k3s flavour of the control plane: one "k3s server" process.
	ComponentK3s
	// The upstream control plane as three processes: what a tenant ran before
	// ComponentControlPlane, adopted as it runs; the front's.
	ComponentAPIServer
	ComponentControllerManager
	ComponentScheduler
	// ComponentCloudControllerManager comes after the control plane (seed D1): useless
	// without an apiserver, and placing it before would move the guard seam.
	ComponentCloudControllerManager
	// ComponentKwok simulates the guests' kubelets. It runs in the cluster's node group,
	// started with the first simulated guest and reaped before the control plane.
	ComponentKwok
	// ComponentGuest is a real guest's init (socialweb-guest), one group per guest, reaped
	// before the control plane as kwok is.
	ComponentGuest
	// ComponentControlPlane is a tenant's control plane in one process (kube-control-plane,
	// built in components/): the upstream kube-apiserver, kube-controller-manager and
	// kube-scheduler, each from its own flags and credential. It starts where the three
	// would (Order).
	ComponentControlPlane
)

// Order is c's place in a group's start order: its number, but for ComponentControlPlane,
// which was appended after the node group's members and starts where the control plane
// does, after kine and before the CCM.
func (c Component) Order() int {
	if c == ComponentControlPlane {
		return 2*int(ComponentK3s) + 1
	}
	return 2 * int(c)
}

var names = map[Component]string{
	ComponentPostgres:               "postgres",
	ComponentOpenBao:                "openbao",
	ComponentKine:                   "kine",
	ComponentK3s:                    "k3s",
	ComponentAPIServer:              "kube-apiserver",
	ComponentControllerManager:      "kube-controller-manager",
	ComponentScheduler:              "kube-scheduler",
	ComponentCloudControllerManager: "cloud-controller-manager",
	ComponentKwok:                   "kwok",
	ComponentGuest:                  "guest",
	ComponentControlPlane:           "kube-control-plane",
}

func (c Component) String() string {
	if n, ok := names[c]; ok {
		return n
	}
	return fmt.Sprintf("component(%d)", int(c))
}

// IsControlPlane reports whether c is part of the Kubernetes control plane (either flavour).
func (c Component) IsControlPlane() bool {
	switch c {
	case ComponentK3s, ComponentControlPlane, ComponentAPIServer, ComponentControllerManager, ComponentScheduler:
		return true
	}
	return false
}
