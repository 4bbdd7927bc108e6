package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// KubeletRoot is g as a kubelet's cgroupRoot names it: one path from the root of every
// hierarchy. On v1 it is g's path in the memory hierarchy; a host may have put the
// provider at different paths in different hierarchies (this one does: memory below
// /process_api/..., cpu at /), so PrepareForKubelet makes this same path in each, which
// then bounds the pods by the cluster's memory limit but, on such a host, not its CPU.
func (g *Group) KubeletRoot() string {
	if g.h.Version == V2 {
		return strings.TrimPrefix(g.dir(""), g.h.mount)
	}
	return strings.TrimPrefix(g.dir("memory"), filepath.Join(g.h.mount, "memory"))
}

// v1Hierarchies are the v1 hierarchies mounted below mount, by directory name (cpu,
// cpuset, memory, devices, systemd...): a kubelet makes its pods' groups in each. With
// unified, the hybrid layout's v2 hierarchy is listed too, where runc mirrors them.
func (h *Hierarchy) v1Hierarchies(unified bool) []string {
	entries, _ := os.ReadDir(h.mount)
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(h.mount, e.Name(), "cgroup.procs")); err == nil && (unified || e.Name() != "unified") {
			out = append(out, e.Name())
		}
	}
	return out
}

// dirIn is g's KubeletRoot in v1 hierarchy name.
func (g *Group) dirIn(name string) string {
	return filepath.Join(g.h.mount, name, g.KubeletRoot())
}

// PrepareForKubelet makes g in every v1 hierarchy, not only the ones the provider limits
// with: a kubelet refuses a cgroupRoot missing from a hierarchy it uses. cpuset's CPUs
// and memory nodes are copied down each new level, which the kernel leaves empty. On v2
// the group Create made is enough.
func (g *Group) PrepareForKubelet() error {
	if g.h.Version == V2 {
		return nil
	}
	for _, name := range g.h.v1Hierarchies(false) {
		dir := g.dirIn(name)
		if _, err := os.Stat(dir); err == nil {
			continue
		}
		if name != "cpuset" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("cgroup %s: %w", g.rel, err)
			}
			continue
		}
		// Walk down from the hierarchy's root, giving each new level its parent's sets.
		root := filepath.Join(g.h.mount, name)
		rel, _ := filepath.Rel(root, dir)
		cur := root
		for _, part := range strings.Split(rel, string(filepath.Separator)) {
			parent := cur
			cur = filepath.Join(cur, part)
			if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("cgroup %s: %w", g.rel, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if b, _ := os.ReadFile(filepath.Join(cur, f)); len(strings.TrimSpace(string(b))) > 0 {
					continue
				}
				b, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					return fmt.Errorf("cgroup %s: %w", g.rel, err)
				}
				if err := os.WriteFile(filepath.Join(cur, f), b, 0o644); err != nil {
					return fmt.Errorf("cgroup %s: %s: %w", g.rel, f, err)
				}
			}
		}
	}
	return nil
}

// RemoveEverywhere removes g and every group below it in every hierarchy, the ones a
// kubelet made in hierarchies the provider does not limit with included. A process left
// in one is an error naming it.
func (g *Group) RemoveEverywhere() error {
	if err := g.Remove(); err != nil {
		return err
	}
	if g.h.Version == V2 {
		return nil
	}
	var errs []error
	for _, name := range g.h.v1Hierarchies(true) {
		var dirs []string
		filepath.WalkDir(g.dirIn(name), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := removeDir(d); err != nil {
				errs = append(errs, err)
				break
			}
		}
		// Its parents there exist only for the kubelet's sake where they are not the
		// provider's own cgroup or above it: the last guest's removal takes them, the
		// subtree included, and on a host where the provider sits at another path in this
		// hierarchy, the levels PrepareForKubelet made for KubeletRoot. An rmdir of a
		// parent another guest still uses fails, and stops the climb.
		own := filepath.Join(g.h.mount, name, g.h.own[name], g.h.own["name="+name])
		if name == "unified" {
			own = filepath.Join(g.h.mount, name, g.h.own[""])
		}
		if slices.Contains(Controllers, name) {
			own = g.h.dirs[name] // the subtree: Prune takes it with the last cluster
		}
		for d := filepath.Dir(g.dirIn(name)); d != own && !strings.HasPrefix(own, d+string(filepath.Separator)) && d != filepath.Join(g.h.mount, name); d = filepath.Dir(d) {
			if os.Remove(d) != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}
