// Package measure holds what the benchmark programs share: PSS and CPU of a process group,
// the host's, the median, the CPU model, serve as an operator runs it, and failing loudly.
package measure

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"socialweb.computer/kcp/internal/tenantuser"
)

// GroupPSS sums the PSS (MiB) of every process in process group pgid.
func GroupPSS(pgid int) float64 {
	total := 0.0
	for _, f := range groupStats(pgid) {
		total += PSS(f.pid)
	}
	return total
}

// procStat is a process's /proc/<pid>/stat: its fields after the command name.
type procStat struct {
	pid    int
	fields []string
}

// groupStats are the stats of every live process in process group pgid.
func groupStats(pgid int) []procStat {
	ents, _ := os.ReadDir("/proc")
	var out []procStat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := stat(pid); len(f) >= 13 && f[2] == strconv.Itoa(pgid) { // field 5: pgrp
			out = append(out, procStat{pid, f})
		}
	}
	return out
}

// PSS is one process's PSS (MiB); 0 when it cannot be read.
func PSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// Median of v; 0 for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// CPUModel is the first "model name" of /proc/cpuinfo.
func CPUModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown cpu"
}

// Check exits with err, if any.
func Check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// DataRoot makes a fresh data root the postgres user can traverse (0711) and returns it
// with the function that removes it.
func DataRoot() (string, func()) {
	root, err := os.MkdirTemp("", "socialweb-bench-")
	Check(err)
	Check(os.Chmod(root, 0o711))
	return root, func() {
		// The tenant user of every cluster left under it goes with it, as deleting the
		// cluster would have removed it.
		dirs, _ := filepath.Glob(filepath.Join(root, "clusters", "*"))
		for _, d := range dirs {
			tenantuser.Remove(tenantuser.Name(d))
		}
		os.RemoveAll(root)
	}
}

// MarkedGroups are the process groups of every process whose command line names marker
// (a data root), or whose working directory is below it (the CCM's argv is its binary
// alone; it runs in its DataDir): each component of a cluster leads a group of its own,
// and the groups hold what their leaders started (Postgres's backends name no path).
func MarkedGroups(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	seen := map[int]bool{}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if !strings.Contains(string(cmd), marker) && !strings.HasPrefix(cwd+"/", marker) {
			continue
		}
		if pg := stat(pid); len(pg) > 2 {
			if g, err := strconv.Atoi(pg[2]); err == nil && !seen[g] {
				seen[g] = true
				out = append(out, g)
			}
		}
	}
	return out
}

// GroupCPU is the CPU time (user and system, in seconds) the live processes of group
// pgid have used.
func GroupCPU(pgid int) float64 {
	total := 0.0
	for _, p := range groupStats(pgid) {
		u, _ := strconv.ParseFloat(p.fields[11], 64) // field 14: utime, in clock ticks
		s, _ := strconv.ParseFloat(p.fields[12], 64) // field 15: stime
		total += (u + s) / 100                       // USER_HZ is 100 on Linux
	}
	return total
}

// HostCPU is the busy and total time (seconds) of every CPU since boot, from /proc/stat.
func HostCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	Check(err)
	line, _, _ := strings.Cut(string(b), "\n")
	for i, v := range strings.Fields(line)[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		total += n / 100
		if i != 3 && i != 4 { // idle, iowait
			busy += n / 100
		}
	}
	return busy, total
}

// HostMemoryUsed is MemTotal minus MemAvailable (GiB): what this host's memory holds that
// it could not hand out.
func HostMemoryUsed() float64 {
	b, err := os.ReadFile("/proc/meminfo")
	Check(err)
	kb := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			kb[k], _ = strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		}
	}
	return (kb["MemTotal"] - kb["MemAvailable"]) / 1024 / 1024
}

// PhaseReason is a Cluster's phase and its Ready condition's reason, such as "Sleeping
// Sleeping": asleep, its processes gone (not falling asleep, nor a wake's stale status).
func PhaseReason(u *unstructured.Unstructured) string {
	p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Ready" {
			return fmt.Sprint(p, " ", m["reason"])
		}
	}
	return p
}

// stat is the fields of /proc/<pid>/stat after the command name; nil when it cannot be read.
func stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
}

// GroupLeader names process group pgid by its leader's executable (argv[0]'s base name):
// a cluster's component. Postgres's processes each lead a group of their own and name
// themselves "postgres: <what>": they are all "postgres".
func GroupLeader(pgid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pgid))
	if err != nil {
		return "?"
	}
	argv0, _, _ := strings.Cut(string(b), "\x00")
	name, _, _ := strings.Cut(filepath.Base(argv0), ":")
	return name
}

// CPUByGroup is the CPU time (user and system, seconds) the live processes of each process
// group have used, and their reaped children, read in one pass over /proc: readings of
// many groups at one moment. A child's time moves into its parent's when the parent
// reaps it: without it, a PostgreSQL backend that exits within a window (kine closes an
// idle connection after 2 minutes) took all the CPU it ever used out of that window.
func CPUByGroup() map[int]float64 {
	ents, _ := os.ReadDir("/proc")
	out := map[int]float64{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := stat(pid)
		if len(f) < 15 {
			continue
		}
		g, _ := strconv.Atoi(f[2])
		for _, ticks := range f[11:15] { // utime, stime, cutime, cstime
			t, _ := strconv.ParseFloat(ticks, 64)
			out[g] += t / 100
		}
	}
	return out
}
