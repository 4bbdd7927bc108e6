// Package leftovers checks, rather than assumes, what a stop left behind: the processes of
// the stack's binaries that still run for a directory, read from the process table, and
// the leases still in the lease book as stored on disk, which is what a successor would
// read. "Nothing is running" is printed only after this says so (invariant 26).
package leftovers

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"socialweb.computer/kcp/internal/portallocator"
	"socialweb.computer/kcp/internal/processrunner"
)

// Leftovers is what still runs, is still leased, or still has a control group.
type Leftovers struct {
	Processes []processrunner.Identity
	Leases    []portallocator.Lease
	Cgroups   []string
	Network   []string // real guests' bridges and iptables chains
}

// None reports whether nothing is left.
func (l Leftovers) None() bool {
	return len(l.Processes) == 0 && len(l.Leases) == 0 && len(l.Cgroups) == 0 && len(l.Network) == 0
}

// String names each leftover so that an operator can act on it: by pid and argv, by port
// and holder.
func (l Leftovers) String() string {
	var parts []string
	for _, id := range l.Processes {
		parts = append(parts, fmt.Sprintf("pid %d (%s)", id.Pid, strings.Join(id.Cmdline, " ")))
	}
	for _, ls := range l.Leases {
		parts = append(parts, fmt.Sprintf("port %d leased to %s", ls.Port, ls.Holder))
	}
	for _, g := range l.Cgroups {
		parts = append(parts, fmt.Sprintf("control group of cluster %s", g))
	}
	parts = append(parts, l.Network...)
	return strings.Join(parts, "; ")
}

// Scope is where to look.
type Scope struct {
	Dir      string   // processes whose argv or environment names a path under Dir
	Programs []string // the stack's binaries, absolute paths
	Book     string   // the lease book's file
	Ports    portallocator.Range
	Leased   func(holder string) bool // which leases count
	// Cgroups, when set, lists the control groups left in scope.
	Cgroups func() ([]string, error)
	// Network, when set, lists the guest networks (bridges, chains) left in scope.
	Network func() ([]string, error)
}

// Find reads the process table and the lease book.
func Find(s Scope) (Leftovers, error) {
	ids, err := Processes(s.Dir, s.Programs)
	if err != nil {
		return Leftovers{}, fmt.Errorf("process table: %w", err)
	}
	// Opened afresh: the book as it is on disk, not a running provider's copy of it.
	book, err := portallocator.Open(s.Book, s.Ports)
	if err != nil {
		return Leftovers{}, err
	}
	out := Leftovers{Processes: ids}
	if s.Cgroups != nil {
		if out.Cgroups, err = s.Cgroups(); err != nil {
			return Leftovers{}, fmt.Errorf("control groups: %w", err)
		}
	}
	if s.Network != nil {
		if out.Network, err = s.Network(); err != nil {
			return Leftovers{}, fmt.Errorf("guest networks: %w", err)
		}
	}
	for _, ls := range book.Leases() {
		if s.Leased(ls.Holder) {
			out.Leases = append(out.Leases, ls)
		}
	}
	return out, nil
}

// Processes lists the live processes of programs that name a path under dir. The trailing
// separator keeps dir "/d/a" from matching "/d/ab".
func Processes(dir string, programs []string) ([]processrunner.Identity, error) {
	return processrunner.FindByMarker(filepath.Clean(dir)+string(filepath.Separator), programs)
}

// Kill sends SIGKILL to each process and its process group (each component leads its own):
// the forced stop of an operator's second Ctrl-C.
func Kill(ids []processrunner.Identity) {
	for _, id := range ids {
		_ = syscall.Kill(-id.Pid, syscall.SIGKILL)
		_ = syscall.Kill(id.Pid, syscall.SIGKILL)
	}
}
