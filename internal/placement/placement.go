// Package placement decides which provider instance runs a Cluster: a pure function of
// what the front shows of the instances (their leases, capacity and the Clusters bound to
// each) and of what the Cluster asks. It reads no clock and does no I/O; the caller
// observes, decides here, and binds (a write with optimistic concurrency on the front).
package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Instance is one provider instance as the front shows it.
type Instance struct {
	Name string
	// Live: its lease is current. An instance whose lease expired is never chosen: it may
	// be gone with its host.
	Live bool
	// Capacity is how many Clusters may be bound to it; Unlimited for no cap. Zero is a
	// valid capacity: the instance runs what it has and takes nothing new (a drain).
	Capacity int
	// Bound is how many Clusters are bound to it now, parked and sleeping ones included:
	// their data is on its host, and they may start there at any moment.
	Bound int
	// MemoryAvailable is the memory its host reported free, in bytes; 0: not reported.
	MemoryAvailable int64
	// External: it reaches the shared external datastore (serve --external-datastore).
	// ExternalProblem, when it has one but does not reach it, is what its last look saw.
	External        bool
	ExternalProblem string
}

// Unlimited is the capacity of an instance without a cap.
const Unlimited = -1

// Free is how many more Clusters i may take: when Unlimited, a large number less what is
// bound, so that instances without a cap still share Clusters out by count.
func (i Instance) Free() int {
	if i.Capacity == Unlimited {
		return 1<<30 - i.Bound
	}
	return max(i.Capacity-i.Bound, 0)
}

// Need is what a Cluster asks of its instance.
type Need struct {
	// Instance is the Cluster's spec.placement.instance: only that instance may take it.
	// Empty: any.
	Instance string
	// Memory is the memory it is expected to use, in bytes (its spec.resources.memory, or
	// the provider's per-cluster estimate); an instance that reported less free is passed
	// over. 0: not considered.
	Memory int64
	// External: its datastore is on the shared external server, which only an instance
	// that reaches it can serve.
	External bool
	// Teardown: the Cluster is deleted and only its teardown remains, which needs no room:
	// capacity and memory do not count.
	Teardown bool
}

// Why a Cluster could not be placed: the reason of its condition.
const (
	NoInstance        = "NoInstance"        // no instance's lease is current
	NoRoom            = "NoRoom"            // every live instance is at capacity or short of memory
	InstanceUnknown   = "InstanceUnknown"   // spec.placement.instance names no instance
	InstanceNotLive   = "InstanceNotLive"   // the instance it names has no current lease
	InstanceHasNoRoom = "InstanceHasNoRoom" // the instance it names is full
)

// Decision is where a Cluster goes: Instance, or, when that is empty, Reason and Message
// say why it goes nowhere yet.
type Decision struct {
	Instance string
	Reason   string
	Message  string
}

// Place picks the instance for a Cluster with need among instances: the live one with
// room that has the most free slots, then the most free memory, then the first name (so
// every instance that decides from the same view decides the same). The order of
// instances does not matter.
func Place(instances []Instance, need Need) Decision {
	if need.Instance != "" {
		i := slices.IndexFunc(instances, func(in Instance) bool { return in.Name == need.Instance })
		switch {
		case i < 0:
			return Decision{Reason: InstanceUnknown, Message: fmt.Sprintf("spec.placement.instance %q: no such instance has registered on the front", need.Instance)}
		case !instances[i].Live:
			return Decision{Reason: InstanceNotLive, Message: fmt.Sprintf("spec.placement.instance %q: its lease has expired; the Cluster waits for it", need.Instance)}
		case !fits(instances[i], need):
			return Decision{Reason: InstanceHasNoRoom, Message: fmt.Sprintf("spec.placement.instance %q: %s", need.Instance, short(instances[i], need))}
		}
		return Decision{Instance: need.Instance}
	}
	var best *Instance
	live := 0
	for k := range instances {
		in := &instances[k]
		if !in.Live {
			continue
		}
		live++
		if fits(*in, need) && (best == nil || better(*in, *best)) {
			best = in
		}
	}
	switch {
	case best != nil:
		return Decision{Instance: best.Name}
	case live == 0:
		return Decision{Reason: NoInstance, Message: "no provider instance has a current lease on the front: is serve running?"}
	}
	if need.External {
		msg := fmt.Sprintf("no instance has room: each of the %d live instances is at its capacity, short of memory, or without the external datastore", live)
		// What keeps the datastore from the instances that have one, in name order: the
		// operator's fix (a password, a firewall) is there.
		var problems []string
		for _, in := range instances {
			if in.Live && in.ExternalProblem != "" {
				problems = append(problems, in.Name+": "+in.ExternalProblem)
			}
		}
		slices.Sort(problems)
		if len(problems) > 0 {
			msg += "; " + strings.Join(problems, "; ")
		}
		return Decision{Reason: NoRoom, Message: msg}
	}
	return Decision{Reason: NoRoom, Message: fmt.Sprintf("no instance has room: each of the %d live instances is at its capacity or short of memory", live)}
}

func fits(in Instance, need Need) bool {
	room := need.Teardown || in.Free() > 0 && (need.Memory == 0 || in.MemoryAvailable == 0 || in.MemoryAvailable >= need.Memory)
	return room && (!need.External || in.External)
}

func short(in Instance, need Need) string {
	if need.External && !in.External {
		if in.ExternalProblem != "" {
			return "it does not reach the external datastore: " + in.ExternalProblem
		}
		return "it has no external datastore (serve --external-datastore)"
	}
	// No counts or bytes that change by the minute: the message goes in a status that
	// every instance writes alike, and would be rewritten at each change.
	if in.Free() == 0 {
		return fmt.Sprintf("it is at its capacity of %d clusters", in.Capacity)
	}
	return fmt.Sprintf("its host has less memory free than the %d MiB the cluster asks", need.Memory>>20)
}

// better says whether a is a better home than b: more free slots, then more free
// memory, then the smaller name.
func better(a, b Instance) bool {
	if c := cmp.Compare(a.Free(), b.Free()); c != 0 {
		return c > 0
	}
	if c := cmp.Compare(a.MemoryAvailable, b.MemoryAvailable); c != 0 {
		return c > 0
	}
	return a.Name < b.Name
}
