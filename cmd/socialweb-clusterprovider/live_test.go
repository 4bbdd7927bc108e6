package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

// The main job as an operator runs it: kill -9 the provider while its cluster runs, start it
// again, and the old processes are reaped (never adopted); then Ctrl-C leaves nothing.
func TestKill9OfTheProviderThenRestart(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kwok", "socialweb-cloud-controller-manager")
	root := livetest.DataRoot(t)
	// With a simulated node, so the node group (kwok) must be reaped and restarted too.
	args := []string{"up", "crashy", "--nodes", "1", "--data-root", root, "--bin-dir", bin, "--port-range", "31300-31399"}
	programs := []string{filepath.Join(bin, "kine"), filepath.Join(bin, "kube-control-plane"), filepath.Join(bin, "kube-apiserver"), filepath.Join(bin, "kube-controller-manager"), filepath.Join(bin, "kube-scheduler"), filepath.Join(bin, "socialweb-cloud-controller-manager"), filepath.Join(bin, "kwok"), "/usr/lib/postgresql/15/bin/postgres"}
	dataDir := filepath.Join(root, "clusters", "crashy") + "/"

	first := startProvider(t, exe, args...)
	first.WaitLine(t, "press Ctrl-C")
	old, err := processrunner.FindByMarker(dataDir, programs)
	if err != nil || len(old) != 5 {
		t.Fatalf("components of the first run: %v, %v; want 5 (four and kwok)", old, err)
	}
	first.Cmd.Process.Signal(syscall.SIGKILL)
	first.Cmd.Wait()
	for _, id := range old {
		if !id.Alive() {
			t.Fatalf("pid %d died with the provider; the restart would have nothing to reap", id.Pid)
		}
	}

	second := startProvider(t, exe, args...)
	second.WaitLine(t, "press Ctrl-C")
	for _, id := range old {
		if id.Alive() {
			t.Errorf("survivor pid %d (%s) was not reaped", id.Pid, id.Cmdline[0])
		}
	}
	now, _ := processrunner.FindByMarker(dataDir, programs)
	if len(now) != 5 {
		t.Fatalf("after the restart %d components run, want 5 (no duplicates)", len(now))
	}

	second.Cmd.Process.Signal(os.Interrupt)
	second.WaitLine(t, "nothing of it is running")
	if err := second.Cmd.Wait(); err != nil {
		t.Fatalf("the provider exited with %v after Ctrl-C", err)
	}
	if left, _ := processrunner.FindByMarker(dataDir, programs); len(left) != 0 {
		t.Fatalf("left running after Ctrl-C: %v", left)
	}
}
