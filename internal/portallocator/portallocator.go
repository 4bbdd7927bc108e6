// Package portallocator hands out TCP ports from a configured range under leases. The lease
// book is a file written atomically on every change, so it survives a provider restart
// (invariant 8); a lease names its holder, and the provider releases it only after the
// holder's processes are reaped.
package portallocator

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"socialweb.computer/kcp/internal/atomicfile"
)

// Range is an inclusive range of ports.
type Range struct{ First, Last int }

// ParseRange parses "FIRST-LAST".
func ParseRange(s string) (Range, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.Atoi(strings.TrimSpace(a))
	last, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil {
		return Range{}, fmt.Errorf("port range %q: want FIRST-LAST, for example 30000-30999", s)
	}
	r := Range{first, last}
	return r, r.Validate()
}

// Validate checks the range is within 1024-65535 and not empty.
func (r Range) Validate() error {
	if r.First < 1024 || r.Last > 65535 || r.First > r.Last {
		return fmt.Errorf("port range %d-%d: want 1024 <= FIRST <= LAST <= 65535", r.First, r.Last)
	}
	return nil
}

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Lease is one port held by one holder (a cluster's name and component).
type Lease struct {
	Port   int    `json:"port"`
	Holder string `json:"holder"`
}

// Errors a caller can test with errors.Is.
var (
	ErrExhausted = errors.New("no free port in range")
	ErrNotHolder = errors.New("lease is held by another holder")
)

// Book is the lease book, backed by one JSON file.
type Book struct {
	path  string
	rng   Range
	probe func(port int) bool // reports whether the port can be bound now

	mu     sync.Mutex
	leases map[int]string
}

// Open loads the book at path (absent means empty). A file that exists and cannot be
// parsed is an error: a lost book would hand out ports that are still in use.
func Open(path string, rng Range) (*Book, error) {
	if err := rng.Validate(); err != nil {
		return nil, err
	}
	b := &Book{path: path, rng: rng, probe: canBind, leases: map[int]string{}}
	data, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err):
		return b, nil
	case err != nil:
		return nil, fmt.Errorf("lease book %s: %w", path, err)
	}
	var ls []Lease
	if err := json.Unmarshal(data, &ls); err != nil {
		return nil, fmt.Errorf("lease book %s: %w (move it aside only if no cluster holds a port)", path, err)
	}
	for _, l := range ls {
		b.leases[l.Port] = l.Holder
	}
	return b, nil
}

// Acquire returns the port leased to holder, leasing a free one if it holds none. A port
// is free when no lease names it and it can be bound on 127.0.0.1 now (or where ProbeOn
// says).
func (b *Book) Acquire(holder string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for p, h := range b.leases {
		if h == holder {
			return p, nil
		}
	}
	for p := b.rng.First; p <= b.rng.Last; p++ {
		if _, taken := b.leases[p]; taken || !b.probe(p) {
			continue
		}
		b.leases[p] = holder
		if err := b.save(); err != nil {
			delete(b.leases, p)
			return 0, err
		}
		return p, nil
	}
	return 0, fmt.Errorf("lease a port for %s: %w %s (%d leased; widen the range or tear down a cluster)", holder, ErrExhausted, b.rng, len(b.leases))
}

// Held is the port leased to holder; 0 when it holds none.
func (b *Book) Held(holder string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for p, h := range b.leases {
		if h == holder {
			return p
		}
	}
	return 0
}

// Release frees port, which holder must hold. Releasing a port nobody holds is a no-op.
func (b *Book) Release(port int, holder string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.leases[port]
	if !ok {
		return nil
	}
	if h != holder {
		return fmt.Errorf("release port %d for %s: %w (%s)", port, holder, ErrNotHolder, h)
	}
	delete(b.leases, port)
	if err := b.save(); err != nil {
		b.leases[port] = h
		return err
	}
	return nil
}

// Path is the book's file.
func (b *Book) Path() string { return b.path }

// Holder returns who holds port, or "".
func (b *Book) Holder(port int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leases[port]
}

// Leases lists the leases, by port.
func (b *Book) Leases() []Lease {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Lease, 0, len(b.leases))
	for p, h := range b.leases {
		out = append(out, Lease{Port: p, Holder: h})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

func (b *Book) save() error {
	ls := make([]Lease, 0, len(b.leases))
	for p, h := range b.leases {
		ls = append(ls, Lease{Port: p, Holder: h})
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].Port < ls[j].Port })
	data, err := json.MarshalIndent(ls, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(b.path, data, 0o600)
}

func canBind(port int) bool { return canBindOn("127.0.0.1", port) }

func canBindOn(host string, port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ProbeOn makes a port free only if it can be bound on each of hosts (the addresses the
// holders listen on: loopback for the front, the apiservers' bind address), not only on
// 127.0.0.1. Call it before the first Acquire.
func (b *Book) ProbeOn(hosts ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probe = func(port int) bool {
		for _, h := range hosts {
			if !canBindOn(h, port) {
				return false
			}
		}
		return true
	}
}
