package materialiser

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)

func obs(mut ...func(*Observed)) Observed {
	o := Observed{Now: t0, Running: true, HasFinalizer: true, Group: GroupAbsent}
	for _, m := range mut {
		m(&o)
	}
	return o
}

// The transitions a cluster goes through, one row each.
func TestTransitions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       Observed
		phase   Phase
		reason  string
		ops     []Op
		requeue bool
	}{
		{"new object: the finalizer first", obs(func(o *Observed) { o.HasFinalizer = false }), PhaseInitializing, "Pending", []Op{OpAddFinalizer}, false},
		{"first bring-up", obs(), PhaseInitializing, "BringingUp", []Op{OpBringUp}, false},
		{"bring-up under way", obs(func(o *Observed) { o.Group, o.Phase = GroupStarting, PhaseInitializing }), PhaseInitializing, "BringingUp", nil, false},
		{"Initializing -> Ready", obs(func(o *Observed) { o.Group, o.Phase = GroupUp, PhaseInitializing }), PhaseReady, "Ready", nil, false},
		{"first bring-up failed: Unavailable, backing off", obs(func(o *Observed) {
			o.Group, o.FailedStep, o.FailedReason, o.Attempts, o.LastAttempt = GroupFailed, "kube-apiserver", "gate deadline", 1, t0.Add(-time.Second)
		}), PhaseUnavailable, "BringUpFailed", nil, true},
		{"failed, backoff over: again", obs(func(o *Observed) {
			o.Group, o.FailedStep, o.Attempts, o.LastAttempt = GroupFailed, "kube-apiserver", 1, t0.Add(-time.Minute)
		}), PhaseUnavailable, "BringUpFailed", []Op{OpBringUp}, false},
		{"Ready -> a component exits: reap the rest", obs(func(o *Observed) {
			o.Group, o.Phase, o.EverReady, o.FailedStep, o.Attempts = GroupExited, PhaseReady, true, "kube-apiserver", 1
		}), PhaseUnavailable, "ComponentExited", []Op{OpStop}, true},
		{"reaped after an exit, backing off", obs(func(o *Observed) {
			o.Phase, o.EverReady, o.Attempts, o.LastAttempt = PhaseUnavailable, true, 2, t0.Add(-time.Second)
		}), PhaseUnavailable, "BackingOff", nil, true},
		{"Unavailable -> bring back up", obs(func(o *Observed) {
			o.Phase, o.EverReady, o.Attempts, o.LastAttempt = PhaseUnavailable, true, 2, t0.Add(-time.Hour)
		}), PhaseUnavailable, "BringingUp", []Op{OpBringUp}, false},
		{"a restarted provider adopting a Ready cluster: still Ready", obs(func(o *Observed) {
			o.Phase, o.EverReady, o.Adopting, o.LeaseHeld = PhaseReady, true, true, true
		}), PhaseReady, "Adopting", []Op{OpBringUp}, false},
		{"adoption under way: still Ready", obs(func(o *Observed) {
			o.Group, o.Phase, o.EverReady, o.Adopting, o.LeaseHeld = GroupStarting, PhaseReady, true, true, true
		}), PhaseReady, "Adopting", nil, false},
		{"not adoptable, brought up again: Unavailable", obs(func(o *Observed) {
			o.Group, o.Phase, o.EverReady, o.LeaseHeld = GroupStarting, PhaseReady, true, true
		}), PhaseUnavailable, "BringingUp", nil, false},
		{"Unavailable -> Ready", obs(func(o *Observed) { o.Group, o.Phase, o.EverReady = GroupUp, PhaseUnavailable, true }), PhaseReady, "Ready", nil, false},
		{"running: false parks a Ready cluster", obs(func(o *Observed) { o.Running, o.Group, o.Phase, o.LeaseHeld = false, GroupUp, PhaseReady, true }), PhaseUnavailable, "Parking", []Op{OpStop}, false},
		{"parked: the lease goes once nothing runs", obs(func(o *Observed) { o.Running, o.LeaseHeld = false, true }), PhaseUnavailable, "Parking", []Op{OpReapSurvivors, OpReleaseLease}, false},
		{"parked and settled", obs(func(o *Observed) { o.Running = false }), PhaseUnavailable, "Parked", nil, false},
		{"Ready -> Draining: nodes first", obs(func(o *Observed) {
			o.Deleting, o.Group, o.Nodes, o.LeaseHeld, o.DataDirExists = true, GroupUp, 2, true, true
		}), PhaseDraining, "Deleting", []Op{OpRemoveNodes}, false},
		{"Draining: then the group", obs(func(o *Observed) { o.Deleting, o.Group, o.LeaseHeld, o.DataDirExists = true, GroupUp, true, true }), PhaseDraining, "Deleting", []Op{OpStop}, false},
		{"Draining: then lease, DataDir, Secret, finalizer", obs(func(o *Observed) { o.Deleting, o.LeaseHeld, o.DataDirExists, o.KubeconfigSet = true, true, true, true }), PhaseDraining, "Deleting", []Op{OpReapSurvivors, OpReleaseLease, OpRemoveDataDir, OpDeleteKubeconfig, OpRemoveFinalizer}, false},
		{"Draining: a failed bring-up has nothing running", obs(func(o *Observed) { o.Deleting, o.Group, o.DataDirExists = true, GroupFailed, true }), PhaseDraining, "Deleting", []Op{OpReapSurvivors, OpRemoveDataDir, OpRemoveFinalizer}, false},
		{"sleep on, recently used: Ready, looked at again when it may sleep", obs(func(o *Observed) {
			o.Group, o.Phase, o.SleepAfter, o.UpSince, o.LastActive = GroupUp, PhaseReady, time.Minute, t0.Add(-time.Hour), t0.Add(-10*time.Second)
		}), PhaseReady, "Ready", nil, true},
		{"sleep on, just woken: idleness counts from coming up", obs(func(o *Observed) {
			o.Group, o.Phase, o.SleepAfter, o.UpSince = GroupUp, PhaseReady, time.Minute, t0.Add(-time.Second)
		}), PhaseReady, "Ready", nil, true},
		{"idle past sleepAfter: falls asleep", obs(func(o *Observed) {
			o.Group, o.Phase, o.SleepAfter, o.UpSince, o.LastActive, o.LeaseHeld = GroupUp, PhaseReady, time.Minute, t0.Add(-time.Hour), t0.Add(-2*time.Minute), true
		}), PhaseSleeping, "FallingAsleep", []Op{OpStop}, false},
		{"idle but a watch is open: stays up", obs(func(o *Observed) {
			o.Group, o.Phase, o.SleepAfter, o.UpSince, o.Connections = GroupUp, PhaseReady, time.Minute, t0.Add(-time.Hour), 1
		}), PhaseReady, "Ready", nil, true},
		{"idle with a real node: stays up", obs(func(o *Observed) {
			o.Group, o.Phase, o.SleepAfter, o.UpSince, o.RealNodes, o.Nodes = GroupUp, PhaseReady, time.Minute, t0.Add(-time.Hour), 1, 1
		}), PhaseReady, "Ready", nil, true},
		{"asleep: the port goes once nothing runs", obs(func(o *Observed) { o.Phase, o.SleepAfter, o.LeaseHeld = PhaseSleeping, time.Minute, true }),
			PhaseSleeping, "FallingAsleep", []Op{OpReapSurvivors, OpReleaseLease}, false},
		{"asleep and settled (also after a provider restart)", obs(func(o *Observed) { o.Phase, o.SleepAfter, o.EverReady = PhaseSleeping, time.Minute, true }),
			PhaseSleeping, "Sleeping", nil, false},
		{"asleep, a request waits: wake", obs(func(o *Observed) { o.Phase, o.SleepAfter, o.WakeRequested = PhaseSleeping, time.Minute, true }),
			PhaseSleeping, "Waking", []Op{OpBringUp}, false},
		{"waking", obs(func(o *Observed) { o.Phase, o.SleepAfter, o.Group = PhaseSleeping, time.Minute, GroupStarting }), PhaseSleeping, "Waking", nil, false},
		{"woken", obs(func(o *Observed) { o.Phase, o.SleepAfter, o.Group, o.UpSince = PhaseSleeping, time.Minute, GroupUp, t0 }), PhaseReady, "Ready", nil, true},
		{"asleep, sleep turned off: wake", obs(func(o *Observed) { o.Phase = PhaseSleeping }), PhaseSleeping, "Waking", []Op{OpBringUp}, false},
		{"asleep, then parked", obs(func(o *Observed) { o.Phase, o.SleepAfter, o.Running = PhaseSleeping, time.Minute, false }), PhaseUnavailable, "Parked", nil, false},
		{"asleep, then deleted", obs(func(o *Observed) {
			o.Phase, o.SleepAfter, o.Deleting, o.DataDirExists = PhaseSleeping, time.Minute, true, true
		}),
			PhaseDraining, "Deleting", []Op{OpReapSurvivors, OpRemoveDataDir, OpRemoveFinalizer}, false},
		{"created asleep: minted, nothing started", obs(func(o *Observed) { o.CreateAsleep, o.SleepAfter = true, time.Minute }),
			PhaseSleeping, "CreatedAsleep", []Op{OpMint}, false},
		{"created asleep and minted (also after a provider restart that minted again)", obs(func(o *Observed) {
			o.CreateAsleep, o.SleepAfter, o.Minted, o.Phase, o.EverReady = true, time.Minute, true, PhaseSleeping, true
		}), PhaseSleeping, "CreatedAsleep", nil, false},
		{"created asleep, a request waits: the first bring-up", obs(func(o *Observed) {
			o.CreateAsleep, o.SleepAfter, o.Minted, o.Phase, o.EverReady, o.WakeRequested = true, time.Minute, true, PhaseSleeping, true, true
		}), PhaseSleeping, "Waking", []Op{OpBringUp}, false},
		{"created asleep with sleep off: brought up", obs(func(o *Observed) { o.CreateAsleep = true }), PhaseInitializing, "BringingUp", []Op{OpBringUp}, false},
		{"created asleep, woken once: sleeps as any cluster", obs(func(o *Observed) {
			o.CreateAsleep, o.SleepAfter, o.Datastore, o.Phase, o.EverReady = true, time.Minute, true, PhaseSleeping, true
		}), PhaseSleeping, "Sleeping", nil, false},
		{"created asleep, then deleted", obs(func(o *Observed) {
			o.CreateAsleep, o.SleepAfter, o.Phase, o.Deleting, o.DataDirExists, o.KubeconfigSet = true, time.Minute, PhaseSleeping, true, true, true
		}), PhaseDraining, "Deleting", []Op{OpReapSurvivors, OpRemoveDataDir, OpDeleteKubeconfig, OpRemoveFinalizer}, false},
		{"host full: the first bring-up waits", obs(func(o *Observed) { o.MaxRunning, o.RunningElsewhere = 2, 2 }),
			PhaseUnavailable, "HostFull", nil, true},
		{"host full: a failed cluster's retry waits", obs(func(o *Observed) {
			o.Group, o.FailedStep, o.Attempts, o.LastAttempt, o.MaxRunning, o.RunningElsewhere = GroupFailed, "kine", 1, t0.Add(-time.Hour), 1, 1
		}), PhaseUnavailable, "HostFull", nil, true},
		{"host full: a wake waits, asleep", obs(func(o *Observed) {
			o.Phase, o.SleepAfter, o.WakeRequested, o.MaxRunning, o.RunningElsewhere, o.LeaseHeld = PhaseSleeping, time.Minute, true, 1, 1, true
		}), PhaseSleeping, "HostFull", []Op{OpReapSurvivors, OpReleaseLease}, true},
		{"room again: brought up", obs(func(o *Observed) { o.MaxRunning, o.RunningElsewhere = 2, 1 }), PhaseInitializing, "BringingUp", []Op{OpBringUp}, false},
		{"host full: a running cluster runs on", obs(func(o *Observed) { o.Group, o.Phase, o.MaxRunning, o.RunningElsewhere = GroupUp, PhaseReady, 1, 3 }),
			PhaseReady, "Ready", nil, false},
		{"deleted before the finalizer was added", obs(func(o *Observed) { o.Deleting, o.HasFinalizer = true, false }), PhaseDraining, "Deleting", nil, false},
	} {
		r := Reconcile(tc.o)
		if r.Phase != tc.phase || r.Ready.Reason != tc.reason || !slices.Equal(r.Ops, tc.ops) || (r.Requeue > 0) != tc.requeue {
			t.Errorf("%s:\n got phase %s reason %s ops %v requeue %s\nwant phase %s reason %s ops %v requeue %v", tc.name, r.Phase, r.Ready.Reason, r.Ops, r.Requeue, tc.phase, tc.reason, tc.ops, tc.requeue)
		}
	}
}

// Every combination of what can be observed, against the rules no answer may break.
func TestEveryObservationKeepsTheRules(t *testing.T) {
	groups := []Group{GroupAbsent, GroupStarting, GroupUp, GroupFailed, GroupExited}
	type sleep struct {
		phase       Phase
		after, idle time.Duration
		conns, real int
		wake        bool
		// created asleep, its datastore made, minted by this run
		create, store, minted bool
	}
	var sleeps []sleep
	for _, phase := range []Phase{"", PhaseReady, PhaseSleeping} {
		for _, after := range []time.Duration{0, time.Minute} {
			for _, idle := range []time.Duration{10 * time.Second, time.Hour} {
				for _, conns := range []int{0, 1} {
					for _, real := range []int{0, 1} {
						for _, wake := range []bool{false, true} {
							for _, c := range [][3]bool{{false, true, false}, {true, false, false}, {true, false, true}, {true, true, false}} {
								sleeps = append(sleeps, sleep{phase, after, idle, conns, real, wake, c[0], c[1], c[2]})
							}
						}
					}
				}
			}
		}
	}
	n := 0
	for _, running := range []bool{false, true} {
		for _, deleting := range []bool{false, true} {
			for _, fin := range []bool{false, true} {
				for _, g := range groups {
					for _, nodes := range []int{0, 2} {
						for _, lease := range []bool{false, true} {
							for _, dir := range []bool{false, true} {
								for _, kc := range []bool{false, true} {
									for _, attempts := range []int{0, 3} {
										for _, ago := range []time.Duration{time.Second, time.Hour} {
											for _, sl := range sleeps {
												for _, full := range []bool{false, true} {
													for _, adopting := range []bool{false, true} {
														o := Observed{Now: t0, Running: running, Deleting: deleting, HasFinalizer: fin, Group: g, Nodes: nodes,
															LeaseHeld: lease, DataDirExists: dir, KubeconfigSet: kc, Attempts: attempts, LastAttempt: t0.Add(-ago), FailedStep: "kine",
															Phase: sl.phase, SleepAfter: sl.after, UpSince: t0.Add(-time.Hour), LastActive: t0.Add(-sl.idle),
															Connections: sl.conns, RealNodes: min(sl.real, nodes), WakeRequested: sl.wake,
															CreateAsleep: sl.create, Datastore: sl.store, Minted: sl.minted}
														if full {
															o.MaxRunning, o.RunningElsewhere = 2, 2
														}
														o.Adopting = adopting
														checkRules(t, o, Reconcile(o))
														n++
													}
												}
											}
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d observations checked", n)
}

func checkRules(t *testing.T, o Observed, r Result) {
	t.Helper()
	fail := func(rule string) { t.Errorf("%s\n observed %+v\n result %+v", rule, o, r) }
	has := func(op Op) bool { return slices.Contains(r.Ops, op) }
	running := o.Group == GroupStarting || o.Group == GroupUp || o.Group == GroupExited
	if has(OpRemoveFinalizer) {
		if !o.Deleting || o.Nodes > 0 || running || r.Ops[len(r.Ops)-1] != OpRemoveFinalizer {
			fail("the finalizer goes last, on deletion, once no node and no process is left")
		}
	}
	if o.Deleting && o.HasFinalizer && !has(OpRemoveFinalizer) && len(r.Ops) == 0 {
		fail("a deletion always makes progress")
	}
	if has(OpRemoveDataDir) && !o.Deleting {
		fail("the tenant's data goes only with the Cluster")
	}
	if has(OpRemoveDataDir) && running {
		fail("the DataDir goes only once nothing runs")
	}
	if has(OpBringUp) && (o.Deleting || !o.Running || !o.HasFinalizer || running) {
		fail("a bring-up only for a running, finalized, not deleted cluster with nothing running")
	}
	if has(OpReleaseLease) && running {
		fail("a lease is released only after its holder is reaped (invariant 8)")
	}
	for _, op := range []Op{OpReleaseLease, OpRemoveDataDir} {
		if i := slices.Index(r.Ops, op); i >= 0 && !slices.Contains(r.Ops[:i], OpReapSurvivors) {
			fail(string(op) + " only after what an earlier run left of the group is reaped (invariant 8)")
		}
	}
	shouldRun := o.Running && !o.Deleting && o.HasFinalizer
	idle := o.SleepAfter > 0 && o.Connections == 0 && o.RealNodes == 0 && !o.Now.Before(o.LastActive.Add(o.SleepAfter)) && !o.Now.Before(o.UpSince.Add(o.SleepAfter))
	// A Ready cluster a restarted provider is taking over as it runs stays Ready meanwhile.
	adopting := o.Adopting && o.Phase == PhaseReady && !(o.CreateAsleep && !o.Datastore) && shouldRun && (o.Group == GroupStarting || o.Group == GroupAbsent)
	if (r.Phase == PhaseReady) != (o.Group == GroupUp && shouldRun && !idle || adopting) {
		fail("Ready exactly when the group is up, it should be, and it is not idle past sleepAfter (or it is being adopted as it runs)")
	}
	if r.Ready.Reason == "Adopting" && !adopting {
		fail("Adopting only for a Ready cluster a restarted provider takes over")
	}
	createdAsleep := shouldRun && o.CreateAsleep && o.SleepAfter > 0 && !o.Datastore && o.Group == GroupAbsent && o.Attempts == 0
	if r.Phase == PhaseSleeping && o.Phase != PhaseSleeping && !(idle && o.Group == GroupUp && shouldRun && has(OpStop)) && !createdAsleep {
		fail("a cluster falls asleep only when up, idle past sleepAfter, with no open connection and no real node, and its processes stop (or it was created asleep)")
	}
	if createdAsleep && !o.WakeRequested && (has(OpBringUp) || r.Phase != PhaseSleeping) {
		fail("a cluster created asleep gets no datastore and no process until a request comes")
	}
	if createdAsleep && o.WakeRequested && !has(OpBringUp) && !o.HostFull() {
		fail("a request for a cluster created asleep brings it up")
	}
	if has(OpMint) && !(createdAsleep && !o.Minted) {
		fail("minting alone is for a cluster created asleep, once a run")
	}
	if has(OpBringUp) && o.Phase == PhaseSleeping && o.Group == GroupAbsent && o.SleepAfter > 0 && !o.WakeRequested {
		fail("a sleeping cluster is brought up only when a request waits (or sleep is off); a failed wake retries as any failed bring-up")
	}
	if shouldRun && o.Phase == PhaseSleeping && o.Group == GroupAbsent && (o.WakeRequested || o.SleepAfter == 0) && !has(OpBringUp) && !o.HostFull() {
		fail("a request for a sleeping cluster wakes it")
	}
	if r.Phase == PhaseSleeping && o.Group == GroupAbsent && o.LeaseHeld && !has(OpReleaseLease) && !has(OpBringUp) {
		fail("a sleeping cluster holds no port (one waking gets its own back)")
	}
	if o.HostFull() && has(OpBringUp) && !adopting {
		fail("no bring-up while the host is full (but a cluster that runs is adopted)")
	}
	if o.HostFull() && shouldRun && !running && o.Group != GroupStarting && len(r.Ops) == 0 && r.Requeue == 0 && r.Phase != PhaseSleeping && r.Ready.Reason != "Parked" {
		fail("a cluster the host has no room for is looked at again")
	}
	if r.Ready.Reason == "HostFull" && !(o.HostFull() && shouldRun) {
		fail("HostFull only when the host is full")
	}
	if r.Ready.Status != (r.Phase == PhaseReady) {
		fail("the Ready condition agrees with the phase")
	}
	if r.Ready.Reason == "" || r.Ready.Message == "" {
		fail("the condition always says why")
	}
	if o.Deleting && r.Phase != PhaseDraining {
		fail("a deleted Cluster is Draining")
	}
	if !o.Deleting && o.Running && o.HasFinalizer && o.Group != GroupUp && o.Group != GroupStarting && len(r.Ops) == 0 && r.Requeue == 0 && r.Phase != PhaseSleeping {
		fail("a cluster that should run and does not is acted on or looked at again")
	}
	if (o.Group == GroupFailed || o.Group == GroupExited) && !o.Deleting && o.Running && o.HasFinalizer && !strings.Contains(r.Ready.Message, o.FailedStep) {
		fail("a failure's condition names the step")
	}
}

func TestBackoffDoublesToItsCap(t *testing.T) {
	want := []time.Duration{0, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	for i, w := range want {
		if got := Backoff(i); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i, got, w)
		}
	}
	if Backoff(100) != BackoffMax {
		t.Errorf("Backoff(100) = %s", Backoff(100))
	}
}
