// Package cgroups gives each tenant cluster a control group of its own: created, with
// the cluster's limits, before its first process starts; every process of the cluster
// placed in it; removed by its teardown. A tenant that floods its apiserver then meets
// its own memory, CPU and process limits, and the kernel reclaims, throttles or
// OOM-kills inside that group alone.
//
// Both hierarchies are handled: cgroup v1, one directory per controller (memory, cpu,
// cpuacct, pids under /sys/fs/cgroup/<controller>), and v2, one unified directory. The
// provider's subtree sits below the provider's own cgroup, so whatever bounds the
// provider (a systemd unit, a container) bounds its tenants too.
package cgroups

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Limits bound one cluster; a zero field is no limit.
type Limits struct {
	MemoryBytes int64 // memory, page cache included
	MilliCPU    int64 // CPU time, in thousandths of a core
	Pids        int64 // processes and threads
}

// IsZero says whether l limits nothing.
func (l Limits) IsZero() bool { return l == Limits{} }

// Or is l with each unset field taken from d (a Cluster's own limits over serve's defaults).
func (l Limits) Or(d Limits) Limits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.MilliCPU == 0 {
		l.MilliCPU = d.MilliCPU
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	return l
}

func (l Limits) String() string {
	part := func(name string, v int64, f func(int64) string) string {
		if v == 0 {
			return name + " unlimited"
		}
		return name + " " + f(v)
	}
	return part("memory", l.MemoryBytes, func(v int64) string { return strconv.FormatInt(v>>20, 10) + "Mi" }) + ", " +
		part("cpu", l.MilliCPU, func(v int64) string { return strconv.FormatInt(v, 10) + "m" }) + ", " +
		part("pids", l.Pids, func(v int64) string { return strconv.FormatInt(v, 10) })
}

// Version is a cgroup hierarchy's.
type Version int

const (
	V1 Version = 1
	V2 Version = 2
)

// Setting is one value written into one controller's file of a group.
type Setting struct {
	Controller string // v1: the hierarchy (memory, cpu, pids); v2: "" (one directory)
	File       string
	Value      string
}

// cfsPeriod is the CPU bandwidth period: 100 ms, the kernel's default.
const cfsPeriod = 100000

// Settings is what limits l are in hierarchy v: every controller's value is written, the
// unlimited ones too, so that a limit lifted from a Cluster is lifted from its group.
func Settings(v Version, l Limits) []Setting {
	if v == V2 {
		mem, cpu, pids := "max", "max "+strconv.Itoa(cfsPeriod), "max"
		if l.MemoryBytes > 0 {
			mem = strconv.FormatInt(l.MemoryBytes, 10)
		}
		if l.MilliCPU > 0 {
			cpu = fmt.Sprintf("%d %d", quota(l.MilliCPU), cfsPeriod)
		}
		if l.Pids > 0 {
			pids = strconv.FormatInt(l.Pids, 10)
		}
		return []Setting{{"", "memory.max", mem}, {"", "cpu.max", cpu}, {"", "pids.max", pids}}
	}
	// v1: -1 lifts memory and CPU bandwidth limits; shares stay at the kernel's default
	// (1024) so that no tenant is favoured when the host is not full.
	mem, cpu, pids := "-1", "-1", "max"
	if l.MemoryBytes > 0 {
		mem = strconv.FormatInt(l.MemoryBytes, 10)
	}
	if l.MilliCPU > 0 {
		cpu = strconv.FormatInt(quota(l.MilliCPU), 10)
	}
	if l.Pids > 0 {
		pids = strconv.FormatInt(l.Pids, 10)
	}
	return []Setting{
		{"memory", "memory.limit_in_bytes", mem},
		{"cpu", "cpu.cfs_period_us", strconv.Itoa(cfsPeriod)},
		{"cpu", "cpu.cfs_quota_us", cpu},
		{"pids", "pids.max", pids},
	}
}

// quota is milli cores as CPU time per period, at least the kernel's minimum of 1 ms.
func quota(milli int64) int64 { return max(milli*cfsPeriod/1000, 1000) }

// Mount is where a host's cgroup hierarchy is mounted.
const Mount = "/sys/fs/cgroup"

// Controllers are the v1 hierarchies a group has a directory in: the limited ones, and
// cpuacct for the CPU time it used.
var Controllers = []string{"memory", "cpu", "cpuacct", "pids"}

// ParseMemory reads a memory limit given as a Kubernetes quantity ("512Mi", "1G"); ""
// is no limit. Less than MinMemory is refused: no control plane starts in less.
func ParseMemory(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Value() < MinMemory {
		return 0, fmt.Errorf("%q: want a quantity of 64Mi or more, such as 1Gi", s)
	}
	return q.Value(), nil
}

// ParseCPU reads a CPU limit given as a Kubernetes quantity ("500m", "2"); "" is no limit.
func ParseCPU(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.MilliValue() < 10 {
		return 0, fmt.Errorf("%q: want a quantity of 10m or more, such as 500m or 2", s)
	}
	return q.MilliValue(), nil
}

// MinMemory is the least memory limit taken (the Cluster schema's minimum too).
const MinMemory = 64 << 20
