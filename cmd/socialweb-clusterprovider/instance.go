package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/externaldb"
	"socialweb.computer/kcp/internal/instancelease"
	"socialweb.computer/kcp/internal/placement"
)

// defaultInstance is serve's --instance when none is given: the host's name, one serve
// running per host, made a DNS label (lowercase; what is not a letter or digit, its
// domain's dots too, becomes '-', so node1.dc1 and node1.dc2 stay two names).
func defaultInstance() string {
	h, _ := os.Hostname()
	return instanceName(h)
}

func instanceName(host string) string {
	b := []byte(strings.ToLower(host))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	n := strings.Trim(string(b), "-")
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	if n == "" {
		return "provider"
	}
	return n
}

// parseCapacity reads --capacity: "clusters=N" (N 0 or more; 0 takes no new Cluster, a
// drain), or "" for no cap.
func parseCapacity(s string) (int, error) {
	if s == "" {
		return placement.Unlimited, nil
	}
	k, v, ok := strings.Cut(s, "=")
	n, err := strconv.Atoi(v)
	if !ok || k != "clusters" || err != nil || n < 0 {
		return 0, fmt.Errorf("--capacity %q: want clusters=N, N 0 or more (0 takes no new cluster), such as clusters=60", s)
	}
	return n, nil
}

// registerInstance puts this serve's Lease on the front and keeps it renewed until ctx
// ends; the returned release deletes it (on a stop that leaves nothing running).
// A name another serve took (its Lease had expired) is sent on lost: serve must stop.
func registerInstance(ctx context.Context, core kubernetes.Interface, loop *clusterprovider.Loop, where string, capacity int, ext *externaldb.Server, lost chan<- error) (release func(context.Context) error, err error) {
	health := externaldb.Watch(ctx, ext, loop.Log)
	cpu := &cpuSampler{}
	h := &instancelease.Holder{Client: core, Name: loop.Instance, Where: where, Log: loop.Log, Report: func() instancelease.Report {
		r := instancelease.Report{Capacity: capacity, Running: loop.Running(), MemoryAvailable: memAvailable(), CPUIdle: cpu.idle()}
		if ext != nil {
			r.External, r.ExternalProblem = health.State()
		}
		return r
	}}
	if err := h.Register(ctx); err != nil {
		return nil, err
	}
	go func() {
		if err := h.Keep(ctx); err != nil {
			lost <- err
		}
	}()
	loop.Instances = func(ctx context.Context) ([]instancelease.Lease, error) { return instancelease.List(ctx, core) }
	return h.Release, nil
}

// memAvailable is the host's MemAvailable in bytes; 0 when it cannot be read.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuTimes is the first line of /proc/stat: the host's CPU time in ticks, idle (idle and
// iowait) and in all.
type cpuTimes struct{ idle, total uint64 }

// parseCPUTimes reads the aggregate "cpu" line of /proc/stat, and counts the cores it
// sums (its "cpuN" lines: every online one, whatever this process's affinity).
func parseCPUTimes(stat string) (cpuTimes, int, bool) {
	cores := 0
	for _, l := range strings.Split(stat, "\n")[1:] {
		if strings.HasPrefix(l, "cpu") {
			cores++
		}
	}
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, 0, false
	}
	var t cpuTimes
	// user nice system idle iowait irq softirq steal: guest time is counted in user already.
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, 0, false
		}
		t.total += v
		if i == 3 || i == 4 {
			t.idle += v
		}
	}
	return t, cores, true
}

// idleMillicores is how many thousandths of a core were idle between two readings on a
// host of cpus cores; -1 when no time passed.
func idleMillicores(before, after cpuTimes, cpus int) int64 {
	if after.total <= before.total {
		return -1
	}
	idle := uint64(0) // iowait may run backwards on some kernels: never below none
	if after.idle > before.idle {
		idle = min(after.idle-before.idle, after.total-before.total)
	}
	return int64(idle * uint64(cpus) * 1000 / (after.total - before.total))
}

// cpuSampler reports the host's idle CPU since its last report (since boot at the first).
type cpuSampler struct {
	mu   sync.Mutex
	last cpuTimes
}

func (c *cpuSampler) idle() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	now, cores, ok := parseCPUTimes(string(b))
	if !ok {
		return -1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	idle := idleMillicores(c.last, now, cores)
	c.last = now
	return idle
}
