package clusterprovider

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/processrunner"
)

// Leftovers is what still runs or is still leased under a data root.
type Leftovers struct {
	Processes []processrunner.Identity
	Leases    []portallocator.Lease
}

// None reports whether nothing is left.
func (l Leftovers) None() bool { return len(l.Processes) == 0 && len(l.Leases) == 0 }

func (l Leftovers) String() string {
	var parts []string
	for _, id := range l.Processes {
		parts = append(parts, fmt.Sprintf("pid %d (%s)", id.Pid, strings.Join(id.Cmdline, " ")))
	}
	for _, ls := range l.Leases {
		parts = append(parts, fmt.Sprintf("port %d leased to %s", ls.Port, ls.Holder))
	}
	return strings.Join(parts, "; ")
}

// Leftovers reads the process table and the lease book: every process that runs one of the
// stack's binaries for a DataDir under this data root (the front's included), and every
// lease. What a provider says when it stops ("nothing is running") is checked against this,
// not assumed (invariant 26).
func (p *Provider) Leftovers() (Leftovers, error) {
	return p.leftovers(p.cfg.DataRoot, func(string) bool { return true })
}

// Leftovers is the provider's Leftovers for this cluster alone: its processes and its lease.
func (c *Cluster) Leftovers() (Leftovers, error) {
	holder := leaseHolder(c.Spec)
	return c.p.leftovers(c.DataDir, func(h string) bool { return h == holder })
}

func (p *Provider) leftovers(dir string, leased func(holder string) bool) (Leftovers, error) {
	ids, err := processrunner.FindByMarker(dir+string(filepath.Separator), p.RequiredBinaries())
	if err != nil {
		return Leftovers{}, fmt.Errorf("process table: %w", err)
	}
	// The book as it is on disk, which is what a successor would read.
	book, err := portallocator.Open(p.book.Path(), p.cfg.Ports)
	if err != nil {
		return Leftovers{}, err
	}
	out := Leftovers{Processes: ids}
	for _, ls := range book.Leases() {
		if leased(ls.Holder) {
			out.Leases = append(out.Leases, ls)
		}
	}
	return out, nil
}

// Kill sends SIGKILL to the process group of every process Leftovers finds: a forced stop
// (the operator's second Ctrl-C). The reaps under way then see their processes gone, remove
// the records and release the leases as in an orderly stop; only the grace is skipped.
func (p *Provider) Kill() error {
	ids, err := processrunner.FindByMarker(p.cfg.DataRoot+string(filepath.Separator), p.RequiredBinaries())
	for _, id := range ids {
		_ = syscall.Kill(-id.Pid, syscall.SIGKILL) // each component leads its own process group
		_ = syscall.Kill(id.Pid, syscall.SIGKILL)
	}
	return err
}
