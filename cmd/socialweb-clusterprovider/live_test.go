package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

// The main job as an operator runs it: kill -9 the provider while its cluster runs, start it
// again, and the old processes are reaped (never adopted); then Ctrl-C leaves nothing.
func TestKill9OfTheProviderThenRestart(t *testing.T) {
	livetest.Start(t)
	bin := livetest.BinDir(t)
	for _, b := range []string{"kube-apiserver", "kwok", "socialweb-cloud-controller-manager"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			livetest.Need(t, bin+"/"+b+" is not installed; run deploy/install-components.sh")
		}
	}
	exe := filepath.Join(t.TempDir(), "socialweb-clusterprovider")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	root := livetest.DataRoot(t)
	// With a simulated node, so the node group (kwok) must be reaped and restarted too.
	args := []string{"up", "crashy", "--nodes", "1", "--data-root", root, "--bin-dir", bin, "--port-range", "33000-33099"}
	programs := []string{filepath.Join(bin, "kine"), filepath.Join(bin, "kube-apiserver"), filepath.Join(bin, "kube-controller-manager"), filepath.Join(bin, "kube-scheduler"), filepath.Join(bin, "socialweb-cloud-controller-manager"), filepath.Join(bin, "kwok"), "/usr/lib/postgresql/15/bin/postgres"}
	dataDir := filepath.Join(root, "clusters", "crashy") + "/"

	start := func() (*exec.Cmd, *bufio.Scanner) {
		cmd := exec.Command(exe, args...)
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, bufio.NewScanner(out)
	}
	waitFor := func(sc *bufio.Scanner, what string) {
		t.Helper()
		done := make(chan bool, 1)
		go func() {
			for sc.Scan() {
				t.Log(sc.Text())
				if strings.Contains(sc.Text(), what) {
					done <- true
					return
				}
			}
			done <- false
		}()
		select {
		case ok := <-done:
			if !ok {
				t.Fatalf("the provider ended before printing %q", what)
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("no %q within 3 minutes", what)
		}
	}

	first, sc := start()
	waitFor(sc, "press Ctrl-C")
	old, err := processrunner.FindByMarker(dataDir, programs)
	if err != nil || len(old) != 7 {
		t.Fatalf("components of the first run: %v, %v; want 7 (six and kwok)", old, err)
	}
	first.Process.Signal(syscall.SIGKILL)
	first.Wait()
	for _, id := range old {
		if !id.Alive() {
			t.Fatalf("pid %d died with the provider; the restart would have nothing to reap", id.Pid)
		}
	}

	second, sc := start()
	waitFor(sc, "press Ctrl-C")
	for _, id := range old {
		if id.Alive() {
			t.Errorf("survivor pid %d (%s) was not reaped", id.Pid, id.Cmdline[0])
		}
	}
	now, _ := processrunner.FindByMarker(dataDir, programs)
	if len(now) != 7 {
		t.Fatalf("after the restart %d components run, want 7 (no duplicates)", len(now))
	}

	second.Process.Signal(os.Interrupt)
	waitFor(sc, "nothing of it is running")
	if err := second.Wait(); err != nil {
		t.Fatalf("the provider exited with %v after Ctrl-C", err)
	}
	if left, _ := processrunner.FindByMarker(dataDir, programs); len(left) != 0 {
		t.Fatalf("left running after Ctrl-C: %v", left)
	}
}
