package cgroups

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/livetest"
)

// Limits become each hierarchy's files; an unlimited field is written as unlimited, so
// lifting a limit from a Cluster lifts it from its running group.
func TestSettings(t *testing.T) {
	l := Limits{MemoryBytes: 512 << 20, MilliCPU: 500, Pids: 300}
	if got := fmt.Sprint(Settings(V1, l)); got != "[{memory memory.limit_in_bytes 536870912} {cpu cpu.cfs_period_us 100000} {cpu cpu.cfs_quota_us 50000} {pids pids.max 300}]" {
		t.Errorf("v1: %s", got)
	}
	if got := fmt.Sprint(Settings(V2, l)); got != "[{ memory.max 536870912} { cpu.max 50000 100000} { pids.max 300}]" {
		t.Errorf("v2: %s", got)
	}
	if got := fmt.Sprint(Settings(V1, Limits{})); got != "[{memory memory.limit_in_bytes -1} {cpu cpu.cfs_period_us 100000} {cpu cpu.cfs_quota_us -1} {pids pids.max max}]" {
		t.Errorf("v1 unlimited: %s", got)
	}
	if got := fmt.Sprint(Settings(V2, Limits{})); got != "[{ memory.max max} { cpu.max max 100000} { pids.max max}]" {
		t.Errorf("v2 unlimited: %s", got)
	}
	if got := Settings(V1, Limits{MilliCPU: 1})[2].Value; got != "1000" {
		t.Errorf("1m: quota %s, want the kernel's minimum 1000", got)
	}
	if got := (Limits{Pids: 5}).Or(Limits{MemoryBytes: 1 << 30, Pids: 9}); got != (Limits{MemoryBytes: 1 << 30, Pids: 5}) {
		t.Errorf("Or: %+v", got)
	}
}

func TestParseProcCgroup(t *testing.T) {
	own := parseProcCgroup([]byte("9:name=systemd:/\n4:memory:/process_api/6061\n2:cpu,cpuacct:/svc\n0::/unified\n"))
	if own["memory"] != "/process_api/6061" || own["cpu"] != "/svc" || own["cpuacct"] != "/svc" || own[""] != "/unified" {
		t.Errorf("%v", own)
	}
}

// On this host's hierarchy: a group is created with its limits, a started process and
// what it forked are placed in it, its usage is read, and it is removed only once its
// processes are gone.
func TestAGroupHoldsItsProcessesAndGoesWithThem(t *testing.T) {
	if os.Geteuid() != 0 {
		livetest.Need(t, "cgroups need root")
	}
	h, err := Detect("/sys/fs/cgroup", fmt.Sprintf("socialweb-kcp-test-%d", os.Getpid()))
	if err != nil {
		livetest.Need(t, err.Error())
	}
	t.Cleanup(func() { h.Group().Remove() })
	g := h.Group("demo", "nodes")
	l := Limits{MemoryBytes: 64 << 20, MilliCPU: 250, Pids: 50}
	if err := g.Create(l); err != nil {
		t.Fatal(err)
	}
	if h.Version == V1 {
		b, _ := os.ReadFile(g.dir("memory") + "/memory.limit_in_bytes")
		if strings.TrimSpace(string(b)) != "67108864" {
			t.Errorf("memory.limit_in_bytes %q", b)
		}
	}
	// A shell that has forked a sleep before it is placed: both end up in the group.
	cmd := exec.Command("/bin/sh", "-c", "sleep 600 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	livetest.Eventually(t, time.Minute, "the shell has forked its sleep", func() (bool, string) {
		n := relatives(cmd.Process.Pid)
		return len(n) == 1, fmt.Sprint(n)
	})
	if err := g.Place(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	procs, err := h.Group("demo").Procs()
	if err != nil || len(procs) != 2 || !slices.Contains(procs, cmd.Process.Pid) {
		t.Fatalf("the group's processes: %v %v; want the shell %d and its sleep", procs, err, cmd.Process.Pid)
	}
	// (Memory is charged where it was first used: a process moved in brings none along.)
	if u, err := g.Usage(); err != nil || u.Pids != 2 {
		t.Errorf("usage %+v %v", u, err)
	}
	if groups, _ := h.Groups(); !slices.Equal(groups, []string{"demo"}) {
		t.Errorf("groups %v", groups)
	}
	h.Prune()
	if !h.Group().Exists() {
		t.Fatal("the subtree was pruned with a group in it")
	}
	if err := h.Group("demo").Remove(); err == nil || !strings.Contains(err.Error(), "processes in it") {
		t.Fatalf("removed while its processes run: %v", err)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	livetest.Eventually(t, time.Minute, "the group is empty", func() (bool, string) {
		p, _ := g.Procs()
		return len(p) == 0, fmt.Sprint(p)
	})
	if err := h.Group("demo").Remove(); err != nil {
		t.Fatal(err)
	}
	if g.Exists() || h.Group("demo").Exists() {
		t.Error("the group is still there")
	}
	if err := h.Group("demo").Remove(); err != nil {
		t.Errorf("removing a group that is gone: %v", err)
	}
	h.Prune()
	if h.Group().Exists() {
		t.Error("the empty subtree outlived its last group")
	}
}

func TestParse(t *testing.T) {
	if m, err := ParseMemory("1Gi"); err != nil || m != 1<<30 {
		t.Errorf("1Gi: %d %v", m, err)
	}
	if c, err := ParseCPU("1.5"); err != nil || c != 1500 {
		t.Errorf("1.5: %d %v", c, err)
	}
	for _, bad := range []string{"lots", "1Mi", "-1Gi"} {
		if _, err := ParseMemory(bad); err == nil || !strings.Contains(err.Error(), "64Mi or more") {
			t.Errorf("memory %q: %v", bad, err)
		}
	}
	if _, err := ParseCPU("1m"); err == nil {
		t.Error("cpu 1m taken")
	}
	if m, err := ParseMemory(""); err != nil || m != 0 {
		t.Errorf("unset: %d %v", m, err)
	}
}
