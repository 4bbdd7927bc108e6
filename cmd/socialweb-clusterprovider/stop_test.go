package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/leftovers"
	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/processrunner"
)

// The first signal cancels (the orderly stop); the second forces, once; neither kills us.
func TestASecondSignalForces(t *testing.T) {
	var out bytes.Buffer
	forced := make(chan struct{}, 2)
	ctx, stop := stopContext(&out, func() error { forced <- struct{}{}; return nil })
	defer stop()
	syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("SIGTERM did not cancel")
	}
	if len(forced) != 0 {
		t.Fatal("the first signal forced")
	}
	syscall.Kill(syscall.Getpid(), syscall.SIGINT)
	select {
	case <-forced:
	case <-time.After(time.Minute):
		t.Fatal("a second signal did not force")
	}
}

// A provider whose output went away keeps stopping: a write to a closed stdout fails with
// EPIPE instead of killing it (Go kills a program on SIGPIPE from fd 1 or 2 unless it takes
// the signal). Were it not taken, this test binary would die here.
func TestAClosedStdoutDoesNotKillAStop(t *testing.T) {
	_, stop := stopContext(&bytes.Buffer{}, func() error { return nil })
	defer stop()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Dup2(saved, 1); syscall.Close(saved) }()
	if err := syscall.Dup2(int(w.Fd()), 1); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r.Close() // no reader: the next write to fd 1 raises SIGPIPE
	_, err = os.Stdout.WriteString("stopping cluster x\n")
	if !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a closed stdout: %v, want EPIPE", err)
	}
}

func leftoversOf(left leftovers.Leftovers, err error) func() (leftovers.Leftovers, error) {
	return func() (leftovers.Leftovers, error) { return left, err }
}

// "Nothing is running" is said only when the check finds nothing; otherwise what is left
// is the error, by pid and by port.
func TestNothingIsRunningIsSaidOnlyWhenChecked(t *testing.T) {
	var out bytes.Buffer
	if err := confirmStopped(leftoversOf(leftovers.Leftovers{}, nil), &out, "stopped; nothing is running"); err != nil || out.String() != "stopped; nothing is running\n" {
		t.Fatalf("nothing left: %v, %q", err, out.String())
	}
	out.Reset()
	left := leftovers.Leftovers{
		Processes: []processrunner.Identity{{Pid: 4242, Cmdline: []string{"/bin/kine", "--endpoint=x"}}},
		Leases:    []portallocator.Lease{{Port: 30001, Holder: "demo/kube-apiserver"}},
	}
	err := confirmStopped(leftoversOf(left, nil), &out, "stopped; nothing is running")
	if err == nil || out.Len() != 0 || !strings.Contains(err.Error(), "pid 4242") || !strings.Contains(err.Error(), "port 30001 leased to demo/kube-apiserver") {
		t.Fatalf("something left: %v, %q", err, out.String())
	}
	out.Reset()
	if err := confirmStopped(leftoversOf(leftovers.Leftovers{}, errors.New("no /proc")), &out, "x"); err == nil || out.Len() != 0 {
		t.Fatalf("a check that could not run: %v, %q", err, out.String())
	}
}
