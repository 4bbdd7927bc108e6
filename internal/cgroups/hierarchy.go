package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Hierarchy is the provider's subtree of the host's cgroups: one directory per v1
// controller, or one v2 directory, each below the provider's own cgroup.
type Hierarchy struct {
	Version Version
	dirs    map[string]string // v1: controller → the subtree's directory; v2: "" → it
	mount   string            // where the hierarchies are mounted, e.g. /sys/fs/cgroup
	own     map[string]string // the provider's own cgroup path, by controller (v1)
	subtree string
}

// Detect finds the cgroup hierarchy mounted at mount (normally /sys/fs/cgroup) and names
// the provider's subtree below this process's own cgroup. A host where neither hierarchy
// has the controllers is an error that says so.
func Detect(mount, subtree string) (*Hierarchy, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	own := parseProcCgroup(self)
	if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err == nil {
		base, err := leaveForLeaf(filepath.Join(mount, own[""]))
		if err != nil {
			return nil, err
		}
		return &Hierarchy{Version: V2, dirs: map[string]string{"": filepath.Join(base, subtree)}, mount: mount, subtree: subtree}, nil
	}
	h := &Hierarchy{Version: V1, dirs: map[string]string{}, mount: mount, own: own, subtree: subtree}
	for _, c := range Controllers {
		path, ok := own[c]
		if _, err := os.Stat(filepath.Join(mount, c, "cgroup.procs")); !ok || err != nil {
			return nil, fmt.Errorf("cgroups: no v1 %s controller at %s/%s and no v2 hierarchy at %s; mount the controllers, or run serve with --cgroups=false", c, mount, c, mount)
		}
		h.dirs[c] = filepath.Join(mount, c, path, subtree)
	}
	return h, nil
}

// ProviderLeaf is where, on v2, the provider moves itself within its own cgroup: v2 lets
// a cgroup hand controllers to its children only while it holds no process itself (as
// systemd's DelegateSubgroup= arranges).
const ProviderLeaf = "socialweb-kcp-provider"

// leaveForLeaf moves this process from its cgroup dir into the leaf below it, and returns
// the cgroup the subtree goes under; a process already in the leaf (a second Detect)
// stays. Untested here: this host's v2 hierarchy has no controllers.
func leaveForLeaf(dir string) (string, error) {
	if filepath.Base(dir) == ProviderLeaf {
		return filepath.Dir(dir), nil
	}
	leaf := filepath.Join(dir, ProviderLeaf)
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return "", fmt.Errorf("cgroup v2: %w; run serve in a cgroup delegated to it (systemd Delegate=yes), or with --cgroups=false", err)
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "", fmt.Errorf("cgroup v2: move the provider into %s: %w; run serve in a cgroup delegated to it (systemd Delegate=yes), or with --cgroups=false", leaf, err)
	}
	return dir, nil
}

// parseProcCgroup reads /proc/<pid>/cgroup ("ID:controllers:path" lines): each v1
// controller's path, and the v2 path under "".
func parseProcCgroup(b []byte) map[string]string {
	own := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			own[""] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			own[c] = f[2]
		}
	}
	return own
}

// controllers is where each of h's groups has a directory, by controller ("" on v2).
func (h *Hierarchy) controllers() []string {
	if h.Version == V2 {
		return []string{""}
	}
	return Controllers
}

// Group is one cgroup of the subtree (a cluster's, or its node group's below it).
type Group struct {
	h   *Hierarchy
	rel string
}

// Group is the group at path below the subtree (path elements: "demo", "nodes").
func (h *Hierarchy) Group(path ...string) *Group {
	return &Group{h: h, rel: filepath.Join(path...)}
}

// Name is the group's path below the subtree.
func (g *Group) Name() string { return g.rel }

func (g *Group) dir(controller string) string { return filepath.Join(g.h.dirs[controller], g.rel) }

// Create makes the group (and any parent it needs) and writes its limits. Creating a
// group that exists rewrites its limits: a bring-up after a crash takes the group over.
func (g *Group) Create(l Limits) error {
	for _, c := range g.h.controllers() {
		err := os.MkdirAll(g.dir(c), 0o755)
		if errors.Is(err, fs.ErrNotExist) {
			// The subtree was removed between its mkdir and ours (Prune, as another
			// cluster's group went): once more makes it again.
			err = os.MkdirAll(g.dir(c), 0o755)
		}
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", g.rel, err)
		}
	}
	if g.h.Version == V2 {
		if err := g.enableControllers(); err != nil {
			return err
		}
	}
	for _, s := range Settings(g.h.Version, l) {
		if err := os.WriteFile(filepath.Join(g.dir(s.Controller), s.File), []byte(s.Value), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: %s = %s: %w", g.rel, s.File, s.Value, err)
		}
	}
	return nil
}

// enableControllers hands memory, cpu and pids down to the group on v2, from the
// provider's own cgroup to the group's parent. The provider's own cgroup must be
// delegated (systemd's Delegate=yes) and, v2's rule, hold no process: Detect moved the
// provider into a leaf of it, and a cluster's processes are in leaves of its group.
func (g *Group) enableControllers() error {
	base := filepath.Dir(g.h.dirs[""])
	for d := base; ; {
		if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+memory +cpu +pids"), 0o644); err != nil {
			return fmt.Errorf("cgroup v2: enable memory, cpu and pids below %s: %w; run serve in a delegated cgroup (systemd Delegate=yes), or with --cgroups=false", d, err)
		}
		if d == filepath.Dir(g.dir("")) {
			return nil
		}
		rel, _ := filepath.Rel(d, g.dir(""))
		d = filepath.Join(d, strings.Split(rel, string(filepath.Separator))[0])
	}
}

// Place moves process pid into the group, then whatever it forked before the move: its
// descendants (a child that left its process group, as Postgres' children do with setsid,
// is still its descendant) and its process group. It runs just after the process started:
// the leader goes first, so that what it forks from then on is born in the group, and the
// rest is looked for again until none is found outside.
func (g *Group) Place(pid int) error {
	if err := g.move(pid); err != nil {
		return err
	}
	for range 10 {
		in, err := g.Procs()
		if err != nil {
			return err
		}
		outside := 0
		for _, p := range relatives(pid) {
			if slices.Contains(in, p) {
				continue
			}
			outside++
			if err := g.move(p); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
		}
		if outside == 0 {
			return nil
		}
	}
	return nil
}

// move writes one process into the group's cgroup.procs, in every controller.
func (g *Group) move(pid int) error {
	for _, c := range g.h.controllers() {
		if err := os.WriteFile(filepath.Join(g.dir(c), "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: place process %d: %w", g.rel, pid, err)
		}
	}
	return nil
}

// relatives is every live descendant of pid and every other member of its process group.
func relatives(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	parent, group := map[int]int{}, map[int]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so read after its ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 {
			continue
		}
		parent[p], _ = strconv.Atoi(f[1])
		group[p], _ = strconv.Atoi(f[2])
	}
	var out []int
	for p := range parent {
		if group[p] == pid {
			out = append(out, p)
			continue
		}
		for q, n := parent[p], 0; q > 1 && n < 64; q, n = parent[q], n+1 {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// Procs is every process in the group and the groups below it.
func (g *Group) Procs() ([]int, error) {
	var out []int
	err := filepath.WalkDir(g.dir(g.h.controllers()[0]), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil // removed while walking
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out, err
}

// Exists says whether the group has a directory in any controller.
func (g *Group) Exists() bool {
	for _, c := range g.h.controllers() {
		if _, err := os.Stat(g.dir(c)); err == nil {
			return true
		}
	}
	return false
}

// Remove removes the group and the groups below it. The kernel refuses while a process
// is in one of them (EBUSY): that is an error naming them, for a teardown must not report
// success while a process of the cluster runs. A group already gone is no error.
func (g *Group) Remove() error {
	var errs []error
	for _, c := range g.h.controllers() {
		var dirs []string
		filepath.WalkDir(g.dir(c), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs) // the deepest first
		for _, d := range dirs {
			if err := removeDir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				break // its parents cannot go either
			}
		}
	}
	if len(errs) > 0 {
		procs, _ := g.Procs()
		return fmt.Errorf("cgroup %s: not removed (processes in it: %v): %w", g.rel, procs, errors.Join(errs...))
	}
	return nil
}

// removeDir removes an empty cgroup. Its last process may have exited a moment ago and
// the kernel not yet let go of it: EBUSY with no process listed is retried, briefly.
func removeDir(d string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := syscall.Rmdir(d)
		if err == nil || err == syscall.ENOENT {
			return nil
		}
		procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != syscall.EBUSY || len(bytes.TrimSpace(procs)) > 0 || time.Now().After(deadline) {
			return &fs.PathError{Op: "rmdir", Path: d, Err: err}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Prune removes the provider's subtree if no group is left in it: the last cluster's
// teardown leaves nothing of the provider in the host's cgroups. A subtree that still
// holds a group (another cluster's) stays; that is no error.
func (h *Hierarchy) Prune() {
	for _, c := range h.controllers() {
		syscall.Rmdir(h.dirs[c]) // ENOTEMPTY or EBUSY while a group is in it
	}
}

// Groups is the name of every group directly below the subtree (one per cluster).
func (h *Hierarchy) Groups() ([]string, error) {
	entries, err := os.ReadDir(h.dirs[h.controllers()[0]])
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, err
}

// Usage is what a group uses now.
type Usage struct {
	MemoryBytes int64         // memory charged now, page cache included
	MemoryPeak  int64         // the most it was charged (0 where the kernel does not say)
	LimitHits   int64         // times the memory limit was hit (v1 failcnt, v2 events max)
	CPU         time.Duration // CPU time used since the group was created
	Pids        int64
}

// Usage reads the group's counters.
func (g *Group) Usage() (Usage, error) {
	var u Usage
	var err error
	read := func(c, file string) int64 {
		if err != nil {
			return 0
		}
		var b []byte
		b, err = os.ReadFile(filepath.Join(g.dir(c), file))
		if err != nil {
			return 0
		}
		var v int64
		v, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v
	}
	if g.h.Version == V2 {
		u.MemoryBytes, u.Pids = read("", "memory.current"), read("", "pids.current")
		u.LimitHits = keyed(g.dir(""), "memory.events", "max")
		u.CPU = time.Duration(keyed(g.dir(""), "cpu.stat", "usage_usec")) * time.Microsecond
		if peak, perr := os.ReadFile(filepath.Join(g.dir(""), "memory.peak")); perr == nil {
			u.MemoryPeak, _ = strconv.ParseInt(strings.TrimSpace(string(peak)), 10, 64)
		}
		return u, err
	}
	u.MemoryBytes, u.MemoryPeak, u.LimitHits = read("memory", "memory.usage_in_bytes"), read("memory", "memory.max_usage_in_bytes"), read("memory", "memory.failcnt")
	u.CPU = time.Duration(read("cpuacct", "cpuacct.usage"))
	u.Pids = read("pids", "pids.current")
	return u, err
}

// keyed reads "key value" lines (memory.events, cpu.stat) for key's value; 0 if absent.
func keyed(dir, file, key string) int64 {
	f, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
