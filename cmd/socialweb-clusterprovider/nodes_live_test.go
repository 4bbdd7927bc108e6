package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

// The operator's node commands against a running provider: up with a node, add one, list,
// remove one, and Ctrl-C leaves nothing, kwok included.
func TestTheOperatorAddsAndRemovesNodes(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kwok", "socialweb-cloud-controller-manager")
	root := livetest.DataRoot(t)
	r := startProvider(t, exe, "up", "ops", "--nodes", "1", "--data-root", root, "--bin-dir", bin, "--port-range", "31400-31499")
	waitLine := func(what string) { t.Helper(); r.WaitLine(t, what) }
	waitLine("node ops-n1")
	waitLine("press Ctrl-C")

	nodesCmd := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		err := run(append(append([]string{"nodes"}, args...), "--data-root", root), &out, os.Stderr)
		if err != nil {
			t.Fatalf("nodes %v: %v", args, err)
		}
		t.Logf("nodes %v:\n%s", args, out.String())
		return out.String()
	}
	if out := nodesCmd("add", "ops", "1"); !strings.Contains(out, "ops-n2") || !strings.Contains(out, "running") {
		t.Fatalf("nodes add printed %q", out)
	}
	if out := nodesCmd("ls", "ops"); strings.Count(out, "\n") != 2 || !strings.Contains(out, "ops-n1") {
		t.Fatalf("nodes ls printed %q, want two nodes", out)
	}
	if out := nodesCmd("rm", "ops", "n1"); !strings.Contains(out, "ops-n1") || !strings.Contains(out, "removed") {
		t.Fatalf("nodes rm printed %q", out)
	}
	if out := nodesCmd("ls", "ops"); strings.Count(out, "\n") != 1 || !strings.Contains(out, "ops-n2") {
		t.Fatalf("nodes ls after rm printed %q", out)
	}
	var errOut bytes.Buffer
	if err := run([]string{"nodes", "rm", "ops", "n9", "--data-root", root}, &errOut, &errOut); err == nil || !strings.Contains(err.Error(), `no node "n9"`) {
		t.Fatalf("removing an unknown node: %v", err)
	}

	r.Cmd.Process.Signal(syscall.SIGINT)
	waitLine("nothing of it is running")
	if err := r.Cmd.Wait(); err != nil {
		t.Fatalf("exit after Ctrl-C: %v", err)
	}
	dataDir := filepath.Join(root, "clusters", "ops") + "/"
	programs := []string{filepath.Join(bin, "kwok"), filepath.Join(bin, "kine"), filepath.Join(bin, "kube-control-plane"), filepath.Join(bin, "kube-apiserver"), filepath.Join(bin, "socialweb-cloud-controller-manager")}
	if left, _ := processrunner.FindByMarker(dataDir, programs); len(left) != 0 {
		t.Fatalf("left running after Ctrl-C: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "run", "control.sock")); !os.IsNotExist(err) {
		t.Fatal("the control socket outlived the provider")
	}
}
