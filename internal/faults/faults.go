// Package faults is the seeded fault schedule the fault-injection live test (faults_live_test.go)
// runs against a provider and its clusters: which fault, on which cluster, after how long.
// The schedule is a pure function of its seed, so a failure replays exactly from the seed
// the test prints.
package faults

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Kind is one kind of fault.
type Kind string

const (
	// kill -9 of one component of one cluster; the provider must notice and bring it back.
	KillPostgres Kind = "kill-postgres"
	KillKine     Kind = "kill-kine"
	// KillControlPlane kills the tenant's kube-control-plane: its apiserver, controller-manager
	// and scheduler at once.
	KillControlPlane Kind = "kill-kube-control-plane"
	KillCCM          Kind = "kill-cloud-controller-manager"
	KillKwok         Kind = "kill-kwok"
	// StalePostgres kills PostgreSQL's whole process group with -9, leaving its pid file
	// and socket behind for the next start to find.
	StalePostgres Kind = "stale-postgres"
	// PortTaken kills the control plane and binds its leased port from another process before
	// the group comes back; the port is freed after Hold.
	PortTaken Kind = "port-taken"

	// kill -9 of serve while everything runs, in a bring-up, or in a teardown; then a restart.
	KillServe               Kind = "kill-serve"
	KillServeDuringBringUp  Kind = "kill-serve-during-bring-up"
	KillServeDuringTeardown Kind = "kill-serve-during-teardown"
	InterruptDuringBringUp  Kind = "sigint-serve-during-bring-up"
	TerminateDuringBringUp  Kind = "sigterm-serve-during-bring-up"
	// PowerCut writes a burst, then kill -9 of every process the provider started, serve
	// included: every acknowledged write must be there after the restart (invariant 27).
	PowerCut Kind = "power-cut"

	// RenewCertificates asks for a renewal of every certificate of one cluster (what
	// socialweb-kcp certs rotate does): the provider restarts it with renewed ones.
	RenewCertificates Kind = "renew-certificates"
	// KillServeDuringRenewal asks for a renewal, then kill -9 of serve while it may be
	// under way; the next serve must finish it.
	KillServeDuringRenewal Kind = "kill-serve-during-renewal"

	ParkUnpark        Kind = "park-unpark"
	DeleteRecreate    Kind = "delete-recreate"
	DeleteDuringBring Kind = "delete-during-bring-up"
)

// Kinds is every kind, in a fixed order.
var Kinds = []Kind{
	KillPostgres, KillKine, KillControlPlane, KillCCM, KillKwok,
	StalePostgres, PortTaken,
	KillServe, KillServeDuringBringUp, KillServeDuringTeardown, InterruptDuringBringUp, TerminateDuringBringUp, PowerCut,
	ParkUnpark, DeleteRecreate, DeleteDuringBring, RenewCertificates, KillServeDuringRenewal,
}

// RestartsServe reports whether the fault ends serve, so the test starts it again.
func (k Kind) RestartsServe() bool {
	switch k {
	case KillServe, KillServeDuringBringUp, KillServeDuringTeardown, InterruptDuringBringUp, TerminateDuringBringUp, PowerCut, KillServeDuringRenewal:
		return true
	}
	return false
}

// Fault is one step of a schedule.
type Fault struct {
	Kind    Kind
	Cluster int           // index of the cluster it hits
	Delay   time.Duration // how long after the triggering action (a bring-up, a teardown) it strikes
}

func (f Fault) String() string {
	return fmt.Sprintf("%s on cluster %d after %s", f.Kind, f.Cluster, f.Delay)
}

// MaxDelay bounds Delay: a bring-up here takes 6 to 10 s, so a fault lands anywhere in it.
const MaxDelay = 6 * time.Second

// Schedule is n faults over clusters clusters from seed. Every kind comes at least once
// when n allows (in an order the seed shuffles), the rest are drawn at random, so a short
// run still covers every kind and a long one mixes them.
func Schedule(seed uint64, n, clusters int) []Fault {
	if n <= 0 || clusters <= 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	kinds := make([]Kind, 0, n)
	for len(kinds) < n {
		if len(kinds)+len(Kinds) <= n || len(kinds) == 0 {
			round := append([]Kind(nil), Kinds...)
			r.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
			kinds = append(kinds, round...)
			continue
		}
		kinds = append(kinds, Kinds[r.IntN(len(Kinds))])
	}
	out := make([]Fault, n)
	for i := range out {
		out[i] = Fault{
			Kind:    kinds[i],
			Cluster: r.IntN(clusters),
			Delay:   time.Duration(r.Int64N(int64(MaxDelay/time.Millisecond))) * time.Millisecond,
		}
	}
	return out
}
