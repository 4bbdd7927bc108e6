package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"socialweb.computer/kcp/internal/placement"
)

// deploy/socialweb-kcp.service runs serve the way its stop and readiness work: serve tells
// systemd it is ready (Type=notify), SIGTERM reaches serve alone (KillMode=process), which
// leaves its clusters to the next serve (--on-exit keep) or, at the host's shutdown, stops
// them in order, a crash restarts it, and a stop has time for many clusters.
// Where systemd-analyze is installed, systemd itself checks the file too.
func TestTheSystemdUnit(t *testing.T) {
	const unit = "../../deploy/socialweb-kcp.service"
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fields := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			fields[k] = v
		}
	}
	for k, want := range map[string]string{"Type": "notify", "KillMode": "process", "KillSignal": "SIGTERM", "Restart": "on-failure", "TimeoutStopSec": "10min", "WantedBy": "multi-user.target"} {
		if fields[k] != want {
			t.Errorf("%s: %s=%q; want %q", unit, k, fields[k], want)
		}
	}
	exe := strings.Fields(fields["ExecStart"])
	if len(exe) < 2 || filepath.Base(exe[0]) != "socialweb-clusterprovider" || exe[1] != "serve" {
		t.Fatalf("%s: ExecStart=%q; want socialweb-clusterprovider serve", unit, fields["ExecStart"])
	}
	// A restart of the unit is hitless: serve leaves its clusters for the next serve, and
	// systemd signals serve alone (KillMode=process above).
	if !strings.Contains(fields["ExecStart"], "--on-exit keep") {
		t.Errorf("%s: ExecStart=%q; want --on-exit keep", unit, fields["ExecStart"])
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed: the fields above are the check")
		return
	}
	// systemd-analyze verify wants ExecStart's program to exist: this test's own binary
	// stands in for /opt/socialweb-kcp/bin/socialweb-clusterprovider.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(t.TempDir(), "socialweb-kcp.service")
	os.WriteFile(copied, []byte(strings.ReplaceAll(string(b), exe[0], self)), 0o600)
	out, err := exec.Command(analyze, "verify", copied).CombinedOutput()
	// verify exits 0 on many complaints (an unknown KillMode is "ignored"): any output is one.
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}
}

func TestParseCapacity(t *testing.T) {
	for in, want := range map[string]int{"": placement.Unlimited, "clusters=0": 0, "clusters=60": 60} {
		if got, err := parseCapacity(in); err != nil || got != want {
			t.Errorf("parseCapacity(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"clusters=-1", "clusters=", "nodes=3", "60", "clusters=many"} {
		if _, err := parseCapacity(bad); err == nil || !strings.Contains(err.Error(), "--capacity") {
			t.Errorf("parseCapacity(%q): %v; want an error naming --capacity", bad, err)
		}
	}
}

func TestInstanceName(t *testing.T) {
	for host, want := range map[string]string{"vm": "vm", "Node1.DC1.example": "node1-dc1-example", "my_host": "my-host", "": "provider", "-x-": "x",
		strings.Repeat("a", 70): strings.Repeat("a", 63)} {
		if got := instanceName(host); got != want {
			t.Errorf("instanceName(%q) = %q, want %q", host, got, want)
		}
	}
}

// The idle CPU an instance reports: from /proc/stat's cpu line, idle and iowait over all
// the time between two readings, times the cores; nothing when no time passed or the line
// is not one.
func TestIdleCPU(t *testing.T) {
	before, cores, ok := parseCPUTimes("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 50 0 50 350 50 0 0 0 0 0\ncpu1 50 0 50 350 50 0 0 0 0 0\nintr 1\n")
	if !ok || before != (cpuTimes{idle: 800, total: 1000}) || cores != 2 {
		t.Fatalf("parse: %+v, %d cores, %v", before, cores, ok)
	}
	after, _, _ := parseCPUTimes("cpu  400 0 200 1000 200 0 0 0 50 50\n") // guest time is in user already
	if got := idleMillicores(before, after, 2); got != 1000 {
		t.Errorf("idle over the interval: %d millicores, want 1000 (400 of 800 ticks idle, 2 cores)", got)
	}
	if got := idleMillicores(after, after, 2); got != -1 {
		t.Errorf("no time passed: %d, want -1", got)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 x 4 5"} {
		if _, _, ok := parseCPUTimes(bad); ok {
			t.Errorf("parsed %q", bad)
		}
	}
	if s := (&cpuSampler{}).idle(); s < 0 || s > int64(runtime.NumCPU())*1000 {
		t.Errorf("this host's idle CPU since boot: %d millicores", s)
	}
}
