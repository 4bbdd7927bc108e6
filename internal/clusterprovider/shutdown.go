package clusterprovider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/guestnet"
	"socialweb.computer/kcp/internal/leftovers"
	"socialweb.computer/kcp/internal/parallel"
	"socialweb.computer/kcp/internal/procgroup"
)

// Leftovers reads the process table and the lease book: every process that runs one of the
// stack's binaries for a DataDir under this data root (the front's included), and every
// lease. What a provider says when it stops ("nothing is running") is checked against this,
// not assumed (invariant 26).
func (p *Provider) Leftovers() (leftovers.Leftovers, error) {
	return leftovers.Find(p.leftoverScope(p.cfg.DataRoot, func(string) bool { return true }))
}

// Leftovers is the provider's Leftovers for this cluster alone: its processes and its lease.
func (c *Cluster) Leftovers() (leftovers.Leftovers, error) { return c.p.LeftoversOf(c.Name) }

// LeftoversOf checks the cluster name alone, which need not run (a bring-up cut short).
func (p *Provider) LeftoversOf(name string) (leftovers.Leftovers, error) {
	holder := leaseHolder(clusterstack.Spec{Name: name})
	return leftovers.Find(p.leftoverScope(p.DataDir(name), func(h string) bool { return h == holder }))
}

func (p *Provider) leftoverScope(dir string, leased func(holder string) bool) leftovers.Scope {
	// A real guest's init names its DataDir; what it started dies with its PID namespace.
	programs := append(p.RequiredBinaries(), filepath.Join(p.cfg.BinDir, "socialweb-guest"))
	s := leftovers.Scope{Dir: dir, Programs: programs, Book: p.book.Path(), Ports: p.cfg.Ports, Leased: leased}
	s.Network = func() ([]string, error) {
		dirs := []string{dir}
		if dir == p.cfg.DataRoot {
			dirs, _ = filepath.Glob(filepath.Join(p.cfg.DataRoot, "clusters", "*"))
		}
		return guestnet.LeftoversOf(context.Background(), dirs...)
	}
	if h := p.cfg.Cgroups; h != nil {
		s.Cgroups = h.Groups
		if dir != p.cfg.DataRoot { // one cluster's: its group alone
			name := filepath.Base(dir)
			s.Cgroups = func() ([]string, error) {
				if h.Group(name).Exists() {
					return []string{name}, nil
				}
				return nil, nil
			}
		}
	}
	return s
}

// Kill sends SIGKILL to the process group of every process Leftovers finds: a forced stop
// (the operator's second Ctrl-C). The reaps under way then see their processes gone, remove
// the records and release the leases as in an orderly stop; only the grace is skipped.
func (p *Provider) Kill() error {
	ids, err := leftovers.Processes(p.cfg.DataRoot, p.RequiredBinaries())
	leftovers.Kill(ids)
	return err
}

// ReapLeftovers reaps, under every DataDir of the data root, what no group of this run
// holds, and releases every lease whose cluster has no process left. A provider stopped
// right after a restart has not yet reached every cluster an earlier run left running (a
// bring-up waiting for its slot is what would have reaped them): without this, those
// survivors would outlive the stop. Call it once this run's own groups are stopped.
func (p *Provider) ReapLeftovers() error {
	specs := []clusterstack.Spec{p.frontSpec()}
	ents, err := os.ReadDir(filepath.Join(p.cfg.DataRoot, "clusters"))
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			specs = append(specs, p.tenantSpec(e.Name()))
		}
	}
	err = parallel.Each(stopsAtOnce, specs, p.reapSurvivors)
	for _, ls := range p.book.Leases() {
		left, ferr := leftovers.Processes(p.holderDataDir(ls.Holder), p.RequiredBinaries())
		if ferr == nil && len(left) == 0 {
			err = errors.Join(err, p.book.Release(ls.Port, ls.Holder))
		}
	}
	if h := p.cfg.Cgroups; h != nil && err == nil {
		h.Prune() // the provider's subtree goes too once no cluster's group is left in it
	}
	return err
}

// ReapSurvivorsOf reaps what an earlier run left running of cluster name, which no group of
// this run holds: a provider killed in the middle of a teardown or a park leaves part of a
// group running, and the next run, which never brought that cluster up, must reap it before
// it releases the lease or removes the DataDir (invariant 8: nothing of it outlives them).
func (p *Provider) ReapSurvivorsOf(name string) error { return p.reapSurvivors(p.tenantSpec(name)) }

func (p *Provider) reapSurvivors(s clusterstack.Spec) error {
	rerr := p.reapGuestSurvivors(s) // the guests before their control plane
	_, nerr := procgroup.ReapSurvivors(p.nodeGroupOptions(s))
	_, gerr := procgroup.ReapSurvivors(p.groupOptions(s))
	if err := errors.Join(rerr, nerr, gerr); err != nil {
		return fmt.Errorf("cluster %s: %w", s.Name, err)
	}
	// The control group an earlier run made goes with its processes. One that still holds
	// a process is a running cluster's (this run's): it stays.
	if p.cfg.Cgroups != nil && !s.Front {
		g := p.cfg.Cgroups.Group(s.Name)
		if procs, err := g.Procs(); err == nil && len(procs) == 0 {
			if err := g.Remove(); err != nil {
				return fmt.Errorf("cluster %s: %w", s.Name, err)
			}
			p.cfg.Cgroups.Prune()
		}
	}
	return nil
}
