package frontevents

import (
	"errors"
	"strings"
	"testing"
)

// Every change of a Cluster's Ready reason is one Event; a failure is a Warning saying what
// to do; progress within one reason is none.
func TestForCluster(t *testing.T) {
	for _, tc := range []struct {
		was, reason, message string
		want                 bool
		typ, contains        string
	}{
		{"", "BringingUp", "starting the process group", true, "Normal", "starting the process group"},
		{"BringingUp", "BringingUp", "bring-up under way", false, "", ""},
		{"BringingUp", "Ready", "every component passed its gate", true, "Normal", "every component passed its gate"},
		{"BringingUp", "BringUpFailed", "step lease failed: no port", true, "Warning", "socialweb-kcp status demo shows how it goes, socialweb-kcp down demo removes it"},
		{"Ready", "ComponentExited", "kine exited on its own: signal: killed", true, "Warning", "logs/"},
		{"ComponentExited", "BackingOff", "next bring-up in 2s", true, "Normal", "next bring-up in 2s"},
		{"Ready", "Parking", "spec.running is false", true, "Normal", "spec.running is false"},
		{"Parking", "Parked", "processes stopped", true, "Normal", "processes stopped"},
		{"Ready", "", "", false, "", ""},
	} {
		e, ok := ForCluster("demo", tc.was, tc.reason, tc.message)
		if ok != tc.want {
			t.Errorf("%s -> %s: recorded %v; want %v", tc.was, tc.reason, ok, tc.want)
			continue
		}
		if ok && (e.Type != tc.typ || e.Reason != tc.reason || !strings.Contains(e.Message, tc.contains)) {
			t.Errorf("%s -> %s: %+v; want type %s, reason %s, a message with %q", tc.was, tc.reason, e, tc.typ, tc.reason, tc.contains)
		}
	}
}

// A Node's phase changes are Events; over quota and a cluster gone are Warnings.
func TestForNode(t *testing.T) {
	for _, tc := range []struct {
		was, phase, reason string
		want               bool
		typ                string
	}{
		{"", "Pending", "Adopting", true, "Normal"},
		{"Pending", "Joining", "Joining", true, "Normal"},
		{"Joining", "Joining", "Initializing", false, ""},
		{"Joining", "Ready", "Ready", true, "Normal"},
		{"Ready", "Joining", "OverQuota", true, "Warning"},
		{"Ready", "Pending", "ClusterGone", true, "Warning"},
		{"Ready", "Removing", "Removing", true, "Normal"},
	} {
		e, ok := ForNode(tc.was, tc.phase, tc.reason, "m")
		if ok != tc.want || ok && (e.Type != tc.typ || e.Reason != tc.reason) {
			t.Errorf("%s -> %s (%s): %+v %v; want %v %s", tc.was, tc.phase, tc.reason, e, ok, tc.want, tc.typ)
		}
	}
}

// A failed operation is a Warning saying what failed and that it is retried.
func TestOperationFailed(t *testing.T) {
	e := OperationFailed("Stop", errors.New("kine did not stop"))
	if e.Type != "Warning" || e.Reason != "StopFailed" || !strings.Contains(e.Message, "kine did not stop") || !strings.Contains(e.Message, "retries") {
		t.Errorf("%+v", e)
	}
}

// Without a front (a nil Recorder) nothing is recorded and nothing panics.
func TestNilRecorder(t *testing.T) {
	var r *Recorder
	r.Record(Object{Kind: "Cluster", Name: "demo"}, Event{"Normal", "Ready", "m"})
	r.Shutdown()
}
