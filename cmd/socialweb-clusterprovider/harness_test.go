package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/livetest"
)

// liveBinary builds this command for a live test, once the installed components it needs
// are there (else the test fails or skips: invariant 19). It returns the executable and the
// bin dir.
func liveBinary(t *testing.T, needs ...string) (exe, bin string) {
	t.Helper()
	livetest.Start(t)
	bin = livetest.BinDir(t)
	for _, b := range needs {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			livetest.Need(t, bin+"/"+b+" is not installed; run deploy/install-components.sh")
		}
	}
	return livetest.Build(t, "socialweb.computer/kcp/cmd/socialweb-clusterprovider"), bin
}

// running is the provider started by a live test, its stdout as lines.
type running = livetest.Proc

func startProvider(t *testing.T, exe string, args ...string) *running {
	t.Helper()
	return livetest.Run(t, exe, args...)
}

func eventually(t *testing.T, within time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	livetest.Eventually(t, within, what, check)
}

// startServe starts "serve" with its own front under root, its apiservers in ports, and
// returns it with a kubectl bound to its operator kubeconfig and its /metrics URL.
func startServe(t *testing.T, exe, bin, root, ports string) (*running, func(args ...string) string, string) {
	t.Helper()
	return startServeWith(t, exe, bin, root, ports)
}

// startServeWith is startServe with more of serve's flags.
func startServeWith(t *testing.T, exe, bin, root, ports string, flags ...string) (*running, func(args ...string) string, string) {
	t.Helper()
	r, op, metricsURL := livetest.Serve(t, exe, bin, root, ports, flags...)
	return r, func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", op}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}, metricsURL
}
