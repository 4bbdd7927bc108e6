package main

import (
	"bytes"
	"errors"
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
