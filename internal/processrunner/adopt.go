package processrunner

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotOurs: a process is not the one a record names, or not one we started.
var ErrNotOurs = errors.New("not the recorded process")

// Adopt takes over a process an earlier run started from spec: it must still be id (same
// pid, start time and cmdline). From then on Exited, Stop and Tail work as for a process
// Start started, except that its exit status is its parent's to read (Err says only that
// it exited). It is watched through a pidfd (pidfd_open), which names this process and no
// later one with its pid; where the kernel has none, /proc is polled. logFrom is where its
// output began in spec.LogFile.
func Adopt(id Identity, spec Spec, logFrom int64) (*Process, error) {
	if id.Pid <= 1 {
		return nil, fmt.Errorf("pid %d: %w", id.Pid, ErrNotOurs)
	}
	p := &Process{spec: spec, pid: id.Pid, id: id, exited: make(chan struct{}), logFrom: logFrom}
	fd, err := unix.PidfdOpen(id.Pid, 0)
	// The identity is checked after the pidfd is open: the pidfd then names the very
	// process that passed, even if it exits and its pid is reused a moment later.
	if !id.Alive() {
		if err == nil {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("pid %d (%s): %w", id.Pid, strings.Join(id.Cmdline, " "), ErrNotOurs)
	}
	stop := make(chan struct{})
	var once sync.Once
	p.unwatch = func() { once.Do(func() { close(stop) }) }
	gone := func() {
		// The leader gone is not enough: its threads may still hold its sockets.
		for id.Alive() || released(stop) {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		p.err = errors.New("exited (adopted: its exit status is its parent's)")
		close(p.exited)
	}
	if err == nil {
		err = unix.SetNonblock(fd, true)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		go func() { // no pidfd: poll /proc
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for id.Alive() {
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
			gone()
		}()
		return p, nil
	}
	// Non-blocking, the pidfd is the runtime poller's: it polls readable once the process
	// has exited, and no thread waits for it meanwhile. A deadline wakes the wait on stop.
	f := os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", id.Pid))
	go func() {
		defer f.Close()
		if waitReadable(f, stop) {
			gone()
		}
	}()
	go func() {
		select {
		case <-stop:
			f.SetReadDeadline(time.Now())
		case <-p.exited:
		}
	}()
	return p, nil
}

// released says whether stop is closed: the process was let go of, its end is no news.
func released(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// waitReadable waits until f (a pidfd) polls readable, or until stop closes.
func waitReadable(f *os.File, stop <-chan struct{}) bool {
	readable := func(fd uintptr, ms int) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(fds, ms)
		return n > 0
	}
	rc, err := f.SyscallConn()
	for err == nil {
		exited := false
		err = rc.Read(func(fd uintptr) bool {
			exited = readable(fd, 0)
			return exited // false: the poller waits, then asks again
		})
		if exited {
			return true
		}
		select {
		case <-stop:
			return false
		default:
		}
	}
	// Not the poller's (it refused the descriptor): poll it here, a thread held.
	for {
		if readable(f.Fd(), 250) {
			return true
		}
		select {
		case <-stop:
			return false
		default:
		}
	}
}

// Release stops watching an adopted process and leaves it running: the provider hands it
// on to its successor. For a process Start started it does nothing (the child outlives us
// by itself).
func (p *Process) Release() {
	if p.unwatch != nil {
		p.unwatch()
	}
}

// LogFrom is where this process's output began in its LogFile.
func (p *Process) LogFrom() int64 { return p.logFrom }

// tailOf returns the last n lines of path written from offset from on (from the start if
// the file was rotated since and is now shorter), reading at most its last 64 KiB.
func tailOf(path string, from int64, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	if fi.Size() < from {
		from = 0
	}
	if start := fi.Size() - 64<<10; start > from {
		from = start
	}
	b, err := io.ReadAll(io.NewSectionReader(f, from, fi.Size()-from))
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// SpecDigest is a digest of what a process started from spec is: its argv, environment,
// working directory, user, stop signal and namespaces. A process recorded with another
// digest was started from another spec (a flag, a port or an environment changed).
func SpecDigest(spec Spec) string {
	h := sha256.New()
	for _, part := range [][]string{spec.Argv, {"\x00env"}, spec.Env, {"\x00dir", spec.Dir, spec.User, fmt.Sprint(spec.StopSignal), fmt.Sprint(spec.Cloneflags)}} {
		for _, s := range part {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Binary is a binary file as it is on disk: a new build installed over it (a new inode,
// size or modification time) is another binary.
type Binary struct {
	Path  string `json:"path"`
	Dev   uint64 `json:"dev"`
	Inode uint64 `json:"inode"`
	Size  int64  `json:"size"`
	MTime int64  `json:"mtimeNs"`
}

// BinaryOf stats path (following links, as execve does).
func BinaryOf(path string) (Binary, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return Binary{}, err
	}
	return Binary{Path: path, Dev: st.Dev, Inode: st.Ino, Size: st.Size, MTime: st.Mtim.Nano()}, nil
}

// Same says whether b and o are one file, unchanged.
func (b Binary) Same(o Binary) bool {
	return b.Dev == o.Dev && b.Inode == o.Inode && b.Size == o.Size && b.MTime == o.MTime
}

// RunningBinary is the binary pid runs, as the kernel holds it (/proc/<pid>/exe): a
// binary replaced on disk since the process started is not the one at its path now.
func RunningBinary(pid int) (Binary, error) {
	b, err := BinaryOf(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return Binary{}, err
	}
	b.Path, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return b, nil
}

// Cwd is pid's working directory.
func Cwd(pid int) (string, error) { return os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)) }

// EnvironHas says whether pid's environment holds the entry kv ("KEY=VALUE").
func EnvironHas(pid int, kv string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	return slices.ContainsFunc(bytes.Split(b, []byte{0}), func(e []byte) bool { return string(e) == kv })
}

// ConnectedTo says whether pid holds an established TCP connection to port (on any
// address): a client of a server that keeps watches open, as every Kubernetes component
// does with its apiserver, shows it is still one. It reads the process's own sockets
// (/proc/<pid>/fd) against the TCP tables of its network namespace (/proc/<pid>/net/tcp*).
func ConnectedTo(pid, port int) (bool, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	want := fmt.Sprintf(":%04X", port)
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) > 9 && strings.HasSuffix(f[2], want) && f[3] == "01" && inodes[f[9]] {
				return true, nil
			}
		}
	}
	return false, nil
}
