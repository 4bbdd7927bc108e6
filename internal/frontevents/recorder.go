package frontevents

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"socialweb.computer/kcp/api/v1alpha1"
)

// Object names what an Event is about: a Cluster or a Node on the front.
type Object struct {
	Kind, Namespace, Name string
	UID                   types.UID
}

// Recorder records Events on the front through client-go's event recorder, which
// aggregates repeats and writes them in the background with retries.
type Recorder struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

// NewRecorder records through core as component on host.
func NewRecorder(core kubernetes.Interface, component, host string) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: core.CoreV1().Events("")})
	return &Recorder{broadcaster: b, recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: host})}
}

// Record records e on o. A nil Recorder records nothing (tests without a front).
func (r *Recorder) Record(o Object, e Event) {
	if r == nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: v1alpha1.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, UID: o.UID}
	r.recorder.Event(runtime.Object(ref), e.Type, e.Reason, e.Message)
}

// Shutdown stops recording; Events not yet written are dropped.
func (r *Recorder) Shutdown() {
	if r != nil {
		r.broadcaster.Shutdown()
	}
}
