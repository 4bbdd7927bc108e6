// Package procgroup runs a tenant cluster's components as one supervised group: started in
// a fixed order, each behind a readiness gate, and reaped in the reverse order.
package procgroup

import "fmt"

// Component is one member of a cluster's process group. The numeric order is the start
// order; Reap walks it backwards (invariant 4).
type Component int

const (
	ComponentPostgres Component = iota + 1
	// ComponentOpenBao keeps its place for when a bao binary can be had; nothing spawns it here.
	ComponentOpenBao
	ComponentKine
	// ComponentK3s is the k3s flavour of the control plane: one "k3s server" process.
	ComponentK3s
	// The upstream flavour of the control plane: three processes.
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
)

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
}

func (c Component) String() string {
	if n, ok := names[c]; ok {
		return n
	}
	return fmt.Sprintf("component(%d)", int(c))
}

// IsControlPlane reports whether c is part of the Kubernetes control plane (either flavour).
func (c Component) IsControlPlane() bool {
	return c == ComponentK3s || c == ComponentAPIServer || c == ComponentControllerManager || c == ComponentScheduler
}
