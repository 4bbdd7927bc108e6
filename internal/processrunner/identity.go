package processrunner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Identity is how a process is known across a restart of the provider (invariant 12): a pid
// alone can be reused, a pid with its start time and cmdline cannot.
type Identity struct {
	Pid       int      `json:"pid"`
	StartTime uint64   `json:"startTime"` // clock ticks since boot, field 22 of /proc/<pid>/stat
	Cmdline   []string `json:"cmdline"`
}

// IdentityOf reads pid's identity from /proc.
func IdentityOf(pid int) (Identity, error) {
	st, err := startTime(pid)
	if err != nil {
		return Identity{}, err
	}
	cmd, err := Cmdline(pid)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Pid: pid, StartTime: st, Cmdline: cmd}, nil
}

// Cmdline reads /proc/<pid>/cmdline.
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, nil
	}
	return strings.Split(string(b), "\x00"), nil
}

func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses; fields after it are plain.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unparseable", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 { // field 3 is f[0], field 22 is f[19]
		return 0, fmt.Errorf("/proc/%d/stat: unparseable", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// Alive reports whether the process this identity names is still running (not a zombie),
// and is the same process: same pid, start time and cmdline.
func (id Identity) Alive() bool {
	now, err := IdentityOf(id.Pid)
	if err != nil || !samePID(now, id) {
		return false
	}
	return !isZombie(id.Pid)
}

// samePID says whether now, read from /proc, is the process id names: the same start
// time, and the same cmdline unless now's reads empty. It does once the leader thread has
// exited (its memory is gone) while other threads of it still run and hold its
// descriptors, a listening socket among them: that process is not gone yet, and isZombie,
// which looks at every thread, is the one to say when it is. (A reused pid has another
// start time.)
func samePID(now, id Identity) bool {
	if now.StartTime != id.StartTime {
		return false
	}
	return len(now.Cmdline) == 0 || slices.Equal(now.Cmdline, id.Cmdline)
}

// isZombie reports whether pid has exited: every thread of it is a zombie or dead. The
// leader's own state is not enough: a multi-threaded program's leader shows Z while its
// other threads still exit, and they share the descriptor table, so its listening socket
// stays bound until the last of them is gone (a restarted apiserver then failed with
// "address already in use" on the port the dead one had).
func isZombie(pid int) bool {
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true
	}
	for _, t := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			continue // that thread is gone
		}
		if !exitedState(b) {
			return false
		}
	}
	return true
}

// exitedState reads a /proc stat line's state, after the command name (which may hold
// spaces and parentheses): Z (zombie) or X (dead) have exited.
func exitedState(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X'
}

// ErrStillAlive is returned when a process outlived SIGKILL and the deadline.
var ErrStillAlive = errors.New("process still alive after SIGKILL")

// Kill reaps a process that is not our child (a survivor of an earlier run): SIGTERM to
// the process, up to grace for it to go, then SIGKILL to its group, and waits up to a
// further 10 s for it to vanish. A process whose identity no longer matches is left alone.
func (id Identity) Kill(sig syscall.Signal, grace time.Duration) error {
	if id.Pid <= 1 {
		// Never ours: a group of -1 or -0 is every process, or the caller's own group.
		return fmt.Errorf("refusing to signal pid %d", id.Pid)
	}
	if !id.Alive() {
		return nil
	}
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	_ = syscall.Kill(id.Pid, sig)
	if waitGone(id, grace) {
		_ = syscall.Kill(-id.Pid, syscall.SIGKILL) // stragglers in its group
		return nil
	}
	_ = syscall.Kill(-id.Pid, syscall.SIGKILL)
	_ = syscall.Kill(id.Pid, syscall.SIGKILL)
	if !waitGone(id, 10*time.Second) {
		return fmt.Errorf("pid %d (%s): %w", id.Pid, strings.Join(id.Cmdline, " "), ErrStillAlive)
	}
	return nil
}

func waitGone(id Identity, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !id.Alive() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FindByMarker lists the live processes that run one of programs (absolute paths, as
// argv[0]) with an argument or an environment value mentioning marker (for instance a
// cluster's DataDir): the backstop for processes no record names. The environment counts
// because a component configured only by its environment (the CCM) has no DataDir on argv.
// An operator's "tail -f <DataDir>/logs/..." runs no such program and is never matched.
func FindByMarker(marker string, programs []string) ([]Identity, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []Identity
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		id, err := IdentityOf(pid)
		if err != nil || isZombie(pid) || len(id.Cmdline) == 0 || !slices.Contains(programs, id.Cmdline[0]) {
			continue
		}
		if strings.Contains(strings.Join(id.Cmdline[1:], " "), marker) || environMentions(pid, marker) {
			out = append(out, id)
		}
	}
	return out, nil
}

func environMentions(pid int, marker string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return err == nil && bytes.Contains(b, []byte(marker))
}
