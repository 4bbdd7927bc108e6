// Package materialiser is the cluster provider's phase machine, pure: Reconcile takes what
// was observed of one declared cluster (its object, its process group, its leases and files)
// and returns its phase, its Ready condition, the operations to perform in order, when to
// look again, and whether the finalizer may go. It reads no clock (Observed.Now is fed) and
// performs nothing; the reconcile loop around it does the I/O.
package materialiser

import (
	"fmt"
	"slices"
	"time"

	"socialweb.computer/kcp/api/v1alpha1"
)

// Phase is a Cluster's status.phase.
type Phase string

const (
	PhaseInitializing Phase = v1alpha1.PhaseInitializing // first bring-up under way
	PhaseReady        Phase = v1alpha1.PhaseReady
	PhaseUnavailable  Phase = v1alpha1.PhaseUnavailable // parked, failed, or a component died
	PhaseDraining     Phase = v1alpha1.PhaseDraining    // being deleted: nodes, group, lease, DataDir go
	PhaseSleeping     Phase = v1alpha1.PhaseSleeping    // idle: processes stopped, port released, data kept; a request wakes it
)

// Group is what is observed of the cluster's process group.
type Group string

const (
	GroupAbsent   Group = "Absent"   // nothing runs
	GroupStarting Group = "Starting" // a bring-up is under way
	GroupUp       Group = "Up"       // every gate passed, every member runs
	GroupFailed   Group = "Failed"   // the last bring-up failed (at FailedStep), nothing runs
	GroupExited   Group = "Exited"   // a member exited on its own (FailedStep), the rest still run
)

// Op is one operation for the reconcile loop, performed in the order given.
type Op string

const (
	OpAddFinalizer     Op = "AddFinalizer"
	OpBringUp          Op = "BringUp"          // Provider.Up
	OpStop             Op = "Stop"             // reap the groups; data kept
	OpMint             Op = "Mint"             // identity and kubeconfig only: a cluster created asleep
	OpRemoveNodes      Op = "RemoveNodes"      // drain and delete every guest
	OpReapSurvivors    Op = "ReapSurvivors"    // what an earlier run left of the group: before its lease or data go
	OpReleaseLease     Op = "ReleaseLease"     // only once nothing runs
	OpRemoveDataDir    Op = "RemoveDataDir"    // the tenant's data: only on deletion
	OpDeleteKubeconfig Op = "DeleteKubeconfig" // the <cluster>-kubeconfig Secret on the front
	OpRemoveFinalizer  Op = "RemoveFinalizer"  // last: only when every other thing is gone
)

// Observed is one cluster as the loop saw it.
type Observed struct {
	Now time.Time

	// The object.
	Running      bool // spec.running
	Deleting     bool // metadata.deletionTimestamp is set
	HasFinalizer bool
	Phase        Phase // status.phase as last written; "" for a new object
	EverReady    bool  // the cluster has been Ready before (its phase left Initializing)

	// The world.
	Group         Group
	FailedStep    string    // with GroupFailed or GroupExited: which step
	FailedReason  string    // and why
	Attempts      int       // consecutive failed bring-ups or exits, for the backoff
	LastAttempt   time.Time // when the last bring-up started
	Nodes         int       // guests listed in nodes.json
	LeaseHeld     bool
	DataDirExists bool
	KubeconfigSet bool // the <cluster>-kubeconfig Secret exists

	// Sleep: a Ready cluster with no request through the front door for SleepAfter
	// sleeps, and wakes when one comes (WakeRequested).
	SleepAfter    time.Duration // 0: never sleeps
	UpSince       time.Time     // when the group last passed every gate
	LastActive    time.Time     // the last byte a client sent it through the front door; zero: none
	Connections   int           // connections open to it through the front door now
	RealNodes     int           // guests that are not simulated: they keep it awake
	WakeRequested bool          // a connection is held at the front door until it is up

	// Created asleep: with sleep on, a cluster declared so is minted (identity, kubeconfig)
	// but gets no datastore and no process until its first request.
	CreateAsleep bool // spec.createAsleep
	Datastore    bool // its datastore was initialised (by a bring-up): it was awake once
	Minted       bool // this run minted it and delivered its kubeconfig

	// The host guard: at most MaxRunning clusters run on this provider at once (0: no
	// cap); RunningElsewhere is how many others do now (starting, up, or exited and not
	// yet reaped). A bring-up waits while they fill the cap.
	MaxRunning       int
	RunningElsewhere int

	// Adopting: an earlier run of the provider left the cluster running (it holds its
	// lease) and this run is taking it over as it runs, or is about to try: a Ready
	// cluster stays Ready meanwhile, its tenant sees nothing.
	Adopting bool
}

// HostFull says whether a bring-up of this cluster must wait for another one to stop.
func (o Observed) HostFull() bool {
	return o.MaxRunning > 0 && o.RunningElsewhere >= o.MaxRunning
}

// HostFullRecheck is how often a cluster kept down by the host guard looks again.
const HostFullRecheck = 5 * time.Second

// Condition is the Ready condition.
type Condition struct {
	Status  bool
	Reason  string
	Message string
}

// Result is what to do.
type Result struct {
	Phase Phase
	Ready Condition
	// Ops are performed in order; the loop stops at the first that fails and looks again.
	Ops []Op
	// Requeue, when non-zero, is when to look again even if nothing changes.
	Requeue time.Duration
}

// Backoff between bring-up attempts: 2 s doubling to 5 min.
const (
	BackoffBase = 2 * time.Second
	BackoffMax  = 5 * time.Minute
)

// Backoff is the wait before attempt n+1 after n consecutive failures.
func Backoff(failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := BackoffBase
	for i := 1; i < failures && d < BackoffMax; i++ {
		d *= 2
	}
	return min(d, BackoffMax)
}

// Reconcile decides (decide), then the host guard holds back a bring-up the host has no
// room for. An adoption is not held back: the cluster runs already, and holding it back
// would reap it.
func Reconcile(o Observed) Result {
	r := decide(o)
	if slices.Contains(r.Ops, OpBringUp) && o.HostFull() && r.Ready.Reason != ReasonAdopting {
		return hostFull(o, r)
	}
	return r
}

// hostFull is r with its bring-up held back: Unavailable (a sleeping cluster stays
// Sleeping) with a condition that says why and when it starts, looked at again soon. What
// r does besides is still done, and a lease it holds is released.
func hostFull(o Observed, r Result) Result {
	phase := PhaseUnavailable
	if r.Phase == PhaseSleeping {
		phase = PhaseSleeping
	}
	out := Result{Phase: phase, Requeue: HostFullRecheck,
		Ready: notReady("HostFull", fmt.Sprintf("host full: %d of at most %d clusters run on this provider; it starts when one stops, sleeps or is deleted", o.RunningElsewhere, o.MaxRunning))}
	if o.Group == GroupFailed {
		out.Ready.Message += fmt.Sprintf("; its last bring-up failed at step %s: %s", o.FailedStep, o.FailedReason)
	}
	for _, op := range r.Ops {
		if op != OpBringUp {
			out.Ops = append(out.Ops, op)
		}
	}
	// Waiting, it holds no port: a later bring-up leases one again.
	if o.LeaseHeld && (o.Group == GroupAbsent || o.Group == GroupFailed) && !slices.Contains(out.Ops, OpReleaseLease) {
		out.Ops = append(out.Ops, OpReapSurvivors, OpReleaseLease)
	}
	return out
}

// decide is the decision without the host guard. The order of its cases is the priority:
// deletion, then the finalizer, then parking, then bringing up and keeping up.
func decide(o Observed) Result {
	switch {
	case o.Deleting:
		return teardown(o)
	case !o.HasFinalizer:
		// Nothing may run before the finalizer guarantees a teardown.
		return Result{Phase: phaseOr(o.Phase, PhaseInitializing), Ready: notReady("Pending", "adding the teardown finalizer"), Ops: []Op{OpAddFinalizer}}
	case !o.Running:
		return park(o)
	}
	return keepUp(o)
}

// teardown is gated: each thing goes only once what depends on it is gone, and the
// finalizer last (invariant 15).
func teardown(o Observed) Result {
	r := Result{Phase: PhaseDraining, Ready: notReady("Deleting", "tearing the cluster down")}
	if !o.HasFinalizer {
		return r // nothing left of ours
	}
	switch {
	case o.Nodes > 0:
		// Guests go first: drained while the control plane is up, deleted regardless (a
		// real guest is a VM that would outlive its cluster).
		r.Ops = []Op{OpRemoveNodes}
		r.Ready.Message = fmt.Sprintf("removing nodes (%d listed)", o.Nodes)
		return r
	case o.Group != GroupAbsent && o.Group != GroupFailed:
		r.Ops = []Op{OpStop}
		r.Ready.Message = "stopping the process group"
		return r
	}
	// No group of this run runs now (a failed one was reaped, or should have been), but a
	// run killed mid-teardown may have left part of one: reaped before the lease or the
	// data go, on every pass until they have (invariant 8).
	if o.LeaseHeld || o.DataDirExists {
		r.Ops = append(r.Ops, OpReapSurvivors)
	}
	if o.LeaseHeld {
		r.Ops = append(r.Ops, OpReleaseLease)
	}
	if o.DataDirExists {
		r.Ops = append(r.Ops, OpRemoveDataDir)
	}
	if o.KubeconfigSet {
		r.Ops = append(r.Ops, OpDeleteKubeconfig)
	}
	r.Ops = append(r.Ops, OpRemoveFinalizer)
	return r
}

// park stops the processes and keeps the data. It says Parking while it acts and Parked
// once nothing is left to do, so a watcher knows when the processes are gone.
func park(o Observed) Result {
	r := Result{Phase: PhaseUnavailable, Ready: notReady("Parked", "spec.running is false: processes stopped, port released, data kept")}
	if o.Group == GroupStarting {
		r.Ready = notReady("Parking", "spec.running is false: stopping once the bring-up under way ends")
		r.Ops = []Op{OpStop}
		return r
	}
	if o.Group != GroupAbsent && o.Group != GroupFailed {
		r.Ops = []Op{OpStop}
	}
	if o.LeaseHeld && (o.Group == GroupAbsent || o.Group == GroupFailed) {
		r.Ops = append(r.Ops, OpReapSurvivors, OpReleaseLease)
	}
	if len(r.Ops) > 0 {
		r.Ready = notReady("Parking", "spec.running is false: stopping the process group, then releasing its port; data kept")
	}
	return r
}

// keepUp brings the cluster up, and back up after a failure or an exit, with backoff.
func keepUp(o Observed) Result {
	down := PhaseInitializing
	if o.EverReady {
		down = PhaseUnavailable
	}
	switch o.Group {
	case GroupUp:
		r := Result{Phase: PhaseReady, Ready: Condition{Status: true, Reason: "Ready", Message: "every component passed its gate"}}
		if wait, ok := SleepIn(o); ok && wait <= 0 {
			return Result{Phase: PhaseSleeping, Ready: notReady("FallingAsleep", fmt.Sprintf("no request for %s: stopping the processes, then releasing the port; data kept", o.SleepAfter)), Ops: []Op{OpStop}}
		} else if ok {
			r.Requeue = wait
		} else if o.SleepAfter > 0 {
			r.Requeue = o.SleepAfter // busy now: look again, as nothing else may change to say it is idle
		}
		return r
	case GroupStarting:
		if o.adopting() {
			return adopting()
		}
		if o.Phase == PhaseSleeping {
			return Result{Phase: PhaseSleeping, Ready: notReady("Waking", "a request is waiting at the front door: bring-up under way")}
		}
		return Result{Phase: phaseOr(o.Phase, down), Ready: notReady("BringingUp", "bring-up under way")}
	case GroupExited:
		// A member died: reap the rest now, come back after the backoff.
		return Result{Phase: PhaseUnavailable, Ready: notReady("ComponentExited", fmt.Sprintf("%s exited on its own: %s", o.FailedStep, o.FailedReason)),
			Ops: []Op{OpStop}, Requeue: Backoff(o.Attempts)}
	case GroupFailed:
		r := Result{Phase: PhaseUnavailable, Ready: notReady("BringUpFailed", fmt.Sprintf("step %s failed: %s", o.FailedStep, o.FailedReason))}
		if wait := o.LastAttempt.Add(Backoff(o.Attempts)).Sub(o.Now); wait > 0 {
			r.Requeue = wait
			return r
		}
		r.Ops = []Op{OpBringUp}
		return r
	}
	if o.adopting() {
		r := adopting()
		r.Ops = []Op{OpBringUp}
		return r
	}
	// Created asleep and never woken: minted once per run of the provider (which keeps
	// what exists and delivers the kubeconfig again), nothing else until a request comes.
	if o.CreateAsleep && o.SleepAfter > 0 && !o.Datastore && !o.WakeRequested && o.Attempts == 0 {
		r := Result{Phase: PhaseSleeping, Ready: notReady("CreatedAsleep", "created asleep: identity and kubeconfig minted; no datastore and no process until the first request through the front door")}
		if o.LeaseHeld { // a bring-up cut short before its datastore was made
			r.Ops = []Op{OpReapSurvivors, OpReleaseLease}
		}
		if !o.Minted {
			r.Ops = append(r.Ops, OpMint)
		}
		return r
	}
	// Absent and asleep: it stays so, its port released, until a request wakes it (or
	// sleep is turned off). A provider restarted while a cluster slept finds it here, by
	// its written phase, and starts nothing.
	if o.Phase == PhaseSleeping && o.SleepAfter > 0 && !o.WakeRequested {
		r := Result{Phase: PhaseSleeping, Ready: notReady("Sleeping", fmt.Sprintf("no request for %s: processes stopped, port released, data kept; the first request through the front door wakes it", o.SleepAfter))}
		if o.LeaseHeld {
			r.Ready.Reason, r.Ops = "FallingAsleep", []Op{OpReapSurvivors, OpReleaseLease}
		}
		return r
	}
	if o.Phase == PhaseSleeping {
		return Result{Phase: PhaseSleeping, Ready: notReady("Waking", "a request is waiting at the front door: starting the process group"), Ops: []Op{OpBringUp}}
	}
	// Absent: bring it up (after the backoff, when the last attempt failed or exited).
	if wait := o.LastAttempt.Add(Backoff(o.Attempts)).Sub(o.Now); o.Attempts > 0 && wait > 0 {
		return Result{Phase: PhaseUnavailable, Ready: notReady("BackingOff", fmt.Sprintf("next bring-up in %s", wait.Round(time.Second))), Requeue: wait}
	}
	return Result{Phase: down, Ready: notReady("BringingUp", "starting the process group"), Ops: []Op{OpBringUp}}
}

// adopting says whether the cluster is a Ready one being taken over as it runs (one created
// asleep that never had a datastore cannot be).
func (o Observed) adopting() bool {
	return o.Adopting && o.Phase == PhaseReady && !(o.CreateAsleep && !o.Datastore)
}

// ReasonAdopting is the Ready condition's reason while a restarted provider takes a Ready
// cluster over as it runs.
const ReasonAdopting = "Adopting"

// adopting is a Ready cluster being taken over as it runs: still Ready.
func adopting() Result {
	return Result{Phase: PhaseReady, Ready: Condition{Status: true, Reason: ReasonAdopting,
		Message: "an earlier run of the provider left it running: taking it over, nothing restarts"}}
}

// SleepIn is how long until a Ready cluster may sleep, and whether it ever may now: sleep
// is on, no connection is open through the front door, and no real guest runs on it (a
// real node's kubelet would lose its apiserver; simulated nodes sleep with their cluster).
// Idleness counts from the later of its last request and its coming up, so a cluster
// does not fall asleep the moment it wakes.
func SleepIn(o Observed) (time.Duration, bool) {
	if o.SleepAfter <= 0 || o.Connections > 0 || o.RealNodes > 0 {
		return 0, false
	}
	since := o.LastActive
	if o.UpSince.After(since) {
		since = o.UpSince
	}
	return since.Add(o.SleepAfter).Sub(o.Now), true
}

func notReady(reason, msg string) Condition { return Condition{Reason: reason, Message: msg} }

// phaseOr keeps the phase last written while a step is under way, unless it claims what
// this pass did not establish (Ready, Sleeping) or belongs to a deletion.
func phaseOr(p, def Phase) Phase {
	if p == "" || p == PhaseDraining || p == PhaseReady || p == PhaseSleeping {
		return def
	}
	return p
}
