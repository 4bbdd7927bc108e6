package portallocator

import (
	"fmt"
	"os"
	"strings"
)

// Ephemeral is the kernel's range of ports for outgoing connections
// (net.ipv4.ip_local_port_range) and the ports reserved out of it
// (net.ipv4.ip_local_reserved_ports). A leased port in it, not reserved, can be taken by
// any client's connect() while its apiserver is down (a restart, a wake), and the
// apiserver then fails to bind it: a lease cannot keep the kernel off a port.
type Ephemeral struct {
	Local    Range
	Reserved []Range
}

// Overlap is the first stretch of r the kernel may hand to an outgoing connection, and
// whether there is one.
func (e Ephemeral) Overlap(r Range) (Range, bool) {
	for p := max(r.First, e.Local.First); p <= min(r.Last, e.Local.Last); p++ {
		if e.reserved(p) {
			continue
		}
		q := p
		for q < min(r.Last, e.Local.Last) && !e.reserved(q+1) {
			q++
		}
		return Range{p, q}, true
	}
	return Range{}, false
}

func (e Ephemeral) reserved(p int) bool {
	for _, r := range e.Reserved {
		if p >= r.First && p <= r.Last {
			return true
		}
	}
	return false
}

// CheckNotEphemeral refuses a range the kernel may hand out (see Ephemeral), naming what
// to do instead. Where /proc does not say (not Linux), it has nothing to check.
func CheckNotEphemeral(r Range) error {
	e, err := readEphemeral("/proc/sys/net/ipv4")
	if err != nil {
		return nil
	}
	o, ok := e.Overlap(r)
	if !ok {
		return nil
	}
	return fmt.Errorf("ports %s are in the kernel's ephemeral range %s (net.ipv4.ip_local_port_range), which it hands to outgoing connections, "+
		"so one can hold an apiserver's port when it starts; choose a range below %d (the default is 30000-30999), "+
		"or reserve these ports: sysctl -w net.ipv4.ip_local_reserved_ports=%s", o, e.Local, e.Local.First, r)
}

// readEphemeral reads the two settings from dir (/proc/sys/net/ipv4).
func readEphemeral(dir string) (Ephemeral, error) {
	b, err := os.ReadFile(dir + "/ip_local_port_range")
	if err != nil {
		return Ephemeral{}, err
	}
	var e Ephemeral
	if _, err := fmt.Sscan(string(b), &e.Local.First, &e.Local.Last); err != nil {
		return Ephemeral{}, fmt.Errorf("ip_local_port_range %q: %w", b, err)
	}
	b, err = os.ReadFile(dir + "/ip_local_reserved_ports")
	if err != nil {
		return e, nil // an older kernel: nothing reserved
	}
	for _, f := range strings.Split(strings.TrimSpace(string(b)), ",") {
		if f == "" {
			continue
		}
		if !strings.Contains(f, "-") {
			f += "-" + f
		}
		r, err := ParseRange(f)
		if err != nil {
			return Ephemeral{}, fmt.Errorf("ip_local_reserved_ports: %w", err)
		}
		e.Reserved = append(e.Reserved, r)
	}
	return e, nil
}
