// Package measure holds what the benchmark programs share: PSS of a process group, the
// median, the CPU model, and failing loudly.
package measure

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// GroupPSS sums the PSS (MiB) of every process in process group pgid.
func GroupPSS(pgid int) float64 {
	ents, _ := os.ReadDir("/proc")
	total := 0.0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) { // field 5: pgrp
			continue
		}
		total += PSS(pid)
	}
	return total
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
	return root, func() { os.RemoveAll(root) }
}
