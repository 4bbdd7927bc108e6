// Package frontevents decides which Kubernetes Events the provider records on the Clusters
// and Nodes of its front, the trace `kubectl describe cluster NAME` shows an operator: each
// change of what the provider reports (a bring-up, Ready, a park, a component that exited,
// a failure, a recovery after the provider's own restart) and each operation that failed.
// The decisions are pure functions; Recorder is client-go's event recorder around them.
package frontevents

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Event is one Event to record: its type (Normal or Warning), CamelCase reason and message.
type Event struct{ Type, Reason, Message string }

// clusterWarnings are the Ready reasons an operator must look at, each with what to do.
var clusterWarnings = map[string]string{
	"BringUpFailed":   "the provider retries with backoff; socialweb-kcp status %[1]s shows how it goes, socialweb-kcp down %[1]s removes it",
	"ComponentExited": "the provider brings the cluster back after a backoff; the component's log is under the cluster's DataDir, logs/",
	"LocalNameTaken":  "",
}

// ForCluster is the Event for cluster name's Ready condition going from the reason was to
// reason with message; none (false) when the reason is unchanged: a bring-up's progress
// changes the message many times, and each step is not an event.
func ForCluster(name, was, reason, message string) (Event, bool) {
	if reason == was || reason == "" {
		return Event{}, false
	}
	if todo, warn := clusterWarnings[reason]; warn {
		if todo != "" {
			message += "; " + fmt.Sprintf(todo, name)
		}
		return Event{corev1.EventTypeWarning, reason, message}, true
	}
	return Event{corev1.EventTypeNormal, reason, message}, true
}

// nodeWarnings are the Node reasons an operator must look at.
var nodeWarnings = map[string]bool{"OverQuota": true, "ClusterGone": true}

// ForNode is the Event for a Node whose phase went from was to phase, for reason with
// message; none when the phase is unchanged.
func ForNode(was, phase, reason, message string) (Event, bool) {
	if phase == was || reason == "" {
		return Event{}, false
	}
	typ := corev1.EventTypeNormal
	if nodeWarnings[reason] {
		typ = corev1.EventTypeWarning
	}
	return Event{typ, reason, message}, true
}

// OperationFailed is the Warning for an operation (BringUp, Stop, AddGuest, ...) that
// failed with err; the provider retries it with backoff. The caller decides whether a
// failure is an operator's concern at all (clusterprovider's expected: not a conflict,
// not a stop).
func OperationFailed(op string, err error) Event {
	return Event{corev1.EventTypeWarning, op + "Failed", fmt.Sprintf("%s failed: %v; the provider retries with backoff", op, err)}
}
