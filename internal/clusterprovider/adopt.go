package clusterprovider

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"socialweb.computer/kcp/internal/auditlog"
	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/logfile"
	"socialweb.computer/kcp/internal/nodeprovider"
	"socialweb.computer/kcp/internal/processrunner"
	"socialweb.computer/kcp/internal/procgroup"
)

// ErrNotAdopted: a cluster an earlier run of the provider left is not adopted as it runs
// (nothing of it runs, or not all of it can be proven ours and working); the caller brings
// it up, which reaps what is there first.
var ErrNotAdopted = errors.New("not adopted")

// errNothingToAdopt is the ErrNotAdopted of a cluster of which nothing runs (no lease, no
// process, no DataDir): the usual case at a first start, not worth a line in the log.
var errNothingToAdopt = fmt.Errorf("%w: nothing of it runs", ErrNotAdopted)

// inputsDigest is a digest of what a cluster's components read at their start besides
// their argv and environment: the credentials and configuration in its DataDir, as this
// provider would have them now (the audit policy, the admission and kwok configuration
// are this provider's constants, written at every start). A group recorded with another
// digest reads files that changed since (a certificate renewed, a new provider's policy)
// and is stale. Files a component reloads by itself are left out: the serving certificate
// (kube-apiserver reloads it) and nodes.json (the CCM re-reads it).
func inputsDigest(l clusterstack.Layout) string {
	h := sha256.New()
	skip := map[string]bool{l.APIServerCert(): true, l.APIServerKey(): true, l.NodesFile(): true,
		l.AuditPolicy(): true, l.AdmissionConfig(): true, l.KwokConfig(): true,
		// An external datastore's password is replaced at every start (the fence), and
		// kine reads it only when it dials: no reason to restart anything.
		l.ExternalPGPass(): true, l.ExternalCA(): true}
	for _, f := range l.ComponentFiles() {
		if skip[f] {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			b = []byte("\x00absent")
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(h, "%s %x\n", filepath.Base(f), sum)
	}
	for _, constant := range []string{auditlog.Policy, clusterstack.AdmissionConfig, string(nodeprovider.KwokConfig())} {
		sum := sha256.Sum256([]byte(constant))
		fmt.Fprintf(h, "%x\n", sum)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// connected is the Live gate of a component that listens nowhere (the controller-manager,
// the scheduler, the CCM, kwok): the adopted process holds an established connection to
// its apiserver, as each of them does while its informers watch. It proves the process
// is still a client of that apiserver now, and leaves nothing in the tenant's API (the
// bring-up's probes leave a namespace or a pod).
func connected(port int) procgroup.Gate {
	return func(ctx context.Context) error {
		pid := procgroup.MemberPid(ctx)
		if pid == 0 {
			return errors.New("no process to look at")
		}
		return poll(ctx, fmt.Sprintf("pid %d connected to its apiserver on port %d", pid, port), func(context.Context) (bool, error) {
			return processrunner.ConnectedTo(pid, port)
		})
	}
}

// logLine is the gate of a component that says it is ready on one line of its output
// (the CCM's readiness line, kwok's "Watch nodes"), read from its log file, which the
// component writes itself: the line must come after the gate was made, which is just
// before the process starts, so an earlier run's line does not count.
type logLine struct {
	path string
	line []byte
	from int64
}

func newLogLine(path, line string) *logLine {
	g := &logLine{path: path, line: []byte(line)}
	if fi, err := os.Stat(path); err == nil {
		g.from = fi.Size()
	}
	return g
}

// wait is the bring-up's gate: ready once the line has been written since.
func (g *logLine) wait(ctx context.Context) error {
	from := g.from
	return poll(ctx, fmt.Sprintf("line %q in %s", g.line, g.path), func(context.Context) (bool, error) {
		b, size, err := readFrom(g.path, from)
		if err != nil {
			return false, err
		}
		if bytes.Contains(b, g.line) {
			return true, nil
		}
		// Next time from the last whole line read: a line being written is read again.
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			from = size - int64(len(b)) + int64(i) + 1
		}
		return false, nil
	})
}

// readFrom reads path from offset from on (from its start if it is now shorter: rotated),
// and says the file's size.
func readFrom(path string, from int64) ([]byte, int64, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := fi.Size()
	if from > size {
		from = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, from, size-from))
	return b, size, err
}

// logTrimEvery is how often a running cluster's component logs are looked at for their
// cap; logFollowEvery how often they are read for Config.Log, when it is set.
const (
	logTrimEvery   = 10 * time.Second
	logFollowEvery = 250 * time.Millisecond
)

// logSizes is the size of each component log in the DataDir now: where keepLogs starts
// copying (what an earlier run wrote is not copied again).
func logSizes(l clusterstack.Layout) map[string]int64 {
	out := map[string]int64{}
	logs, _ := filepath.Glob(filepath.Join(l.LogDir(), "*.log"))
	for _, f := range logs {
		if fi, err := os.Stat(f); err == nil {
			out[f] = fi.Size()
		}
	}
	return out
}

// keepLogs keeps the cluster's component logs under their cap until it stops: the
// components write their logs themselves (they outlive the provider), so the provider
// rotates them by copying and truncating (logfile.Trim). With Config.Log it copies what
// they write there too, each line behind its component's name, from offsets on (logSizes
// before the bring-up: its lines come once it has passed).
func (c *Cluster) keepLogs(offsets map[string]int64) {
	every, follow := logTrimEvery, c.p.cfg.Log != nil
	if follow {
		every = logFollowEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	trimmed := time.Now()
	logs := func() []string {
		l, _ := filepath.Glob(filepath.Join(c.Spec.Layout().LogDir(), "*.log"))
		return l
	}
	for {
		select {
		case <-c.stopping:
			return
		case <-t.C:
		}
		for _, f := range logs() {
			if follow {
				b, size, err := readFrom(f, offsets[f])
				if i := bytes.LastIndexByte(b, '\n'); err == nil && i >= 0 {
					prefix := "[" + strings.TrimSuffix(filepath.Base(f), ".log") + "] "
					for _, line := range strings.Split(string(b[:i]), "\n") {
						fmt.Fprintln(c.p.cfg.Log, prefix+line)
					}
					offsets[f] = size - int64(len(b)) + int64(i) + 1
				}
			}
			if time.Since(trimmed) < logTrimEvery {
				continue
			}
			if err := logfile.Trim(f, logfile.DefaultMaxBytes, logfile.DefaultKeep); err != nil && c.p.cfg.Logger != nil {
				c.p.cfg.Logger.Warn("component log not trimmed", "cluster", c.Name, "log", f, "err", err)
			}
		}
		if time.Since(trimmed) >= logTrimEvery {
			trimmed = time.Now()
		}
	}
}

// Detach lets go of the cluster and leaves it running, for the next run of the provider to
// adopt: its groups are released (no process is signalled), its lease stays in the book.
// It is what a provider stopping with serve --on-exit keep does with a Ready cluster.
func (c *Cluster) Detach() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.stopped = true
	close(c.stopping)
	close(c.stopDone)
	c.mu.Unlock()
	c.nodesMu.Lock()
	c.guestsClosed = true
	groups := []*procgroup.Group{c.group, c.nodes}
	for _, g := range c.guests {
		groups = append(groups, g)
	}
	c.nodesMu.Unlock()
	for _, g := range groups {
		if g != nil {
			g.Release()
		}
	}
}

// Adopted says whether this run took the cluster over as an earlier run left it running,
// and Stale why its processes run other than this provider would start them now (empty:
// current). A stale cluster works; its restart is the caller's to schedule.
func (c *Cluster) Adopted() (bool, []string) { return c.adopted, c.stale }
