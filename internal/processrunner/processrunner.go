// Package processrunner starts, signals and waits for one process, or takes over one an
// earlier run started (Adopt). Each process leads its own session and process group
// (setsid), so a signal to the group reaches whatever it forked and nothing the provider's
// terminal or service manager does to the provider's own group reaches it; its environment
// is exactly Spec.Env (nothing is inherited by accident, invariant 13). Its output goes to
// Spec.LogFile, a file it writes itself, so the provider's death costs it nothing (a pipe
// would break, and the next write would kill it with SIGPIPE); or, without a LogFile, it
// is copied line by line to Spec.Output behind Spec.Prefix. The last lines are kept for
// error messages either way.
package processrunner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec says how to run one process.
type Spec struct {
	Argv   []string  // Argv[0] is an absolute path; no secret may appear here (invariant 3)
	Dir    string    // working directory; "" means "/"
	Env    []string  // the child's whole environment, KEY=VALUE
	Prefix string    // put in front of every output line, e.g. "kine"
	Output io.Writer // where prefixed output goes; nil discards it (without a LogFile)
	// Stdin is what the process reads (Run: a statement for Postgres in single-user
	// mode, a secret that must not go on argv); nil is /dev/null.
	Stdin io.Reader
	// LogFile, when set, is where the process writes its output itself (appended, 0600):
	// what outlives the provider. Output and Prefix are then unused.
	LogFile string
	// User, when set, is the OS user the process runs as (Postgres runs as "postgres").
	User string
	// StopSignal is sent to the process itself (not its group) to ask it to stop;
	// zero means SIGTERM. Postgres wants SIGINT (fast shutdown).
	StopSignal syscall.Signal
	// Cgroup, when set, receives the process (and whatever it forked) as soon as it has
	// started, before the caller hears of it: the tenant's control group.
	Cgroup Placer
	// Cloneflags are the namespaces the process gets of its own (CLONE_NEW*): a real
	// guest's init is PID 1 of new mount, UTS, network and PID namespaces.
	Cloneflags uintptr
}

// Placer puts a started process, and its process group, into a control group.
type Placer interface {
	Place(pid int) error
}

// TailLines is how many of the last output lines a Process keeps.
const TailLines = 20

// Process is one started process. One goroutine owns Wait; Exited closes when it returns.
type Process struct {
	spec   Spec
	cmd    *exec.Cmd // nil for an adopted process: not our child
	pid    int
	id     Identity
	exited chan struct{}
	err    error // valid once exited is closed
	// logFrom is the size of Spec.LogFile when the process started: its own output follows.
	logFrom int64
	// unwatch, for an adopted process, stops watching it without touching it (Release).
	unwatch func()

	mu   sync.Mutex
	tail []string
}

// Start starts spec's process in its own process group.
func Start(spec Spec) (*Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("processrunner: empty argv")
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = spec.Dir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.Env = append([]string{}, spec.Env...) // non-nil: an empty Env means an empty environment
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: spec.Cloneflags}
	if spec.User != "" {
		cred, err := credentialFor(spec.User)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr.Credential = cred
		// The binary is opened here, as root, and executed through its descriptor
		// (fexecve's way): the user needs the right to execute the file, not to search
		// every directory above it, so a bin dir in a 0700 checkout serves every tenant's
		// user without opening that checkout to them. argv[0] stays the path, for ps and
		// the backstop; execLink gives the process its binary's name (comm, for top and
		// the OOM killer's log) rather than "3".
		bin, err := os.Open(spec.Argv[0])
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", spec.Argv[0], err)
		}
		defer bin.Close()
		cmd.ExtraFiles = []*os.File{bin}
		cmd.Path = execLink(filepath.Base(spec.Argv[0]))
	}
	p := &Process{spec: spec, cmd: cmd, exited: make(chan struct{})}
	// out is what the child writes to; pr, with no LogFile, what we copy from.
	var out, pr *os.File
	var err error
	if spec.LogFile != "" {
		out, err = os.OpenFile(spec.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("start %s: log file: %w", spec.Argv[0], err)
		}
		if fi, err := out.Stat(); err == nil {
			p.logFrom = fi.Size()
		}
	} else if pr, out, err = os.Pipe(); err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr, cmd.Stdin = out, out, spec.Stdin
	if err := cmd.Start(); err != nil {
		if pr != nil {
			pr.Close()
		}
		out.Close()
		return nil, fmt.Errorf("start %s: %w", spec.Argv[0], err)
	}
	out.Close()
	p.pid = cmd.Process.Pid
	if spec.Cgroup != nil {
		if err := spec.Cgroup.Place(cmd.Process.Pid); err != nil {
			// Nothing runs outside the group it was meant for: the process goes.
			killGroup(cmd.Process.Pid)
			cmd.Wait()
			if pr != nil {
				pr.Close()
			}
			return nil, fmt.Errorf("start %s: %w", spec.Argv[0], err)
		}
	}
	copied := make(chan struct{})
	if pr != nil {
		go func() { p.copy(pr); close(copied) }()
	} else {
		close(copied)
	}
	go func() {
		err := cmd.Wait()
		<-copied // the pipe closes when every holder of it (the group) has exited
		p.err = err
		close(p.exited)
	}()
	// The identity is read once, now, so a later reuse of the pid is never mistaken for us.
	p.id = startedIdentity(cmd.Process.Pid, spec.Argv)
	return p, nil
}

// startedIdentity reads a just-started process's identity. Start returns once execve has
// closed our close-on-exec pipe, which is before the kernel has set up the new argv: for a
// moment /proc/<pid>/cmdline can still read empty, so wait (briefly) until it does not.
func startedIdentity(pid int, argv []string) Identity {
	deadline := time.Now().Add(2 * time.Second)
	for {
		id, err := IdentityOf(pid)
		if err == nil && len(id.Cmdline) > 0 {
			return id
		}
		if time.Now().After(deadline) {
			// Gone already, or unreadable: record what we started.
			return Identity{Pid: pid, StartTime: id.StartTime, Cmdline: argv}
		}
		time.Sleep(time.Millisecond)
	}
}

// Run starts spec and waits for it to exit; a non-zero exit is an error carrying the tail.
func Run(ctx context.Context, spec Spec) error {
	p, err := Start(spec)
	if err != nil {
		return err
	}
	select {
	case <-p.Exited():
	case <-ctx.Done():
		p.Stop(2 * time.Second)
		return fmt.Errorf("%s: %w", spec.Prefix, ctx.Err())
	}
	if err := p.Err(); err != nil {
		return fmt.Errorf("%s: %w; last output:\n%s", spec.Prefix, err, strings.Join(p.Tail(), "\n"))
	}
	return nil
}

func (p *Process) copy(r io.ReadCloser) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.tail = append(p.tail, line)
		if len(p.tail) > TailLines {
			p.tail = p.tail[len(p.tail)-TailLines:]
		}
		p.mu.Unlock()
		if p.spec.Output != nil {
			fmt.Fprintf(p.spec.Output, "[%s] %s\n", p.spec.Prefix, line)
		}
	}
	io.Copy(io.Discard, r)
}

// Pid is the process id (and its process group and session id).
func (p *Process) Pid() int { return p.pid }

// Identity is what this process was when it started: pid, start time, cmdline.
func (p *Process) Identity() Identity { return p.id }

// Exited closes when the process has exited and its output has been drained.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the process exited; valid after Exited is closed.
func (p *Process) Err() error { return p.err }

// Tail returns the last output lines: with a LogFile, the last of what it wrote there.
func (p *Process) Tail() []string {
	if p.spec.LogFile != "" {
		return tailOf(p.spec.LogFile, p.logFrom, TailLines)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.tail...)
}

// Stop asks the process to stop with its StopSignal, waits up to grace, then SIGKILLs its
// whole process group and waits for the exit. Stragglers left in the group after the
// leader exited are killed too. It is safe to call more than once.
func (p *Process) Stop(grace time.Duration) {
	select {
	case <-p.exited:
		killGroup(p.Pid())
		return
	default:
	}
	sig := p.spec.StopSignal
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	if p.cmd == nil {
		// Adopted: not our child, so signalled by its identity, which a reused pid fails.
		_ = p.id.Kill(sig, grace)
		<-p.exited
		return
	}
	_ = p.cmd.Process.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
	}
	killGroup(p.Pid())
	<-p.exited
}

func killGroup(pgid int) {
	if pgid > 1 { // -1 would be every process
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// fdExec is the binary a child executes: its descriptor 3 (ExtraFiles[0]).
const fdExec = "/proc/self/fd/3"

// execDir holds, for each binary name, a symbolic link to fdExec: executing the link runs
// the child's descriptor 3 under the binary's own name. Root's, in /run, so that no user
// can plant a link of its own there.
const execDir = "/run/socialweb-kcp/exec"

var execMu sync.Mutex

// execLink is execDir's link for name, made if it is missing; fdExec itself (the process
// then shows as "3") when it cannot be made or execDir is not root's alone.
func execLink(name string) string {
	execMu.Lock()
	defer execMu.Unlock()
	if err := os.MkdirAll(execDir, 0o755); err != nil {
		return fdExec
	}
	for _, d := range []string{filepath.Dir(execDir), execDir} {
		fi, err := os.Lstat(d)
		st, ok := fi.Sys().(*syscall.Stat_t)
		if err != nil || !fi.IsDir() || !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
			return fdExec
		}
	}
	link := filepath.Join(execDir, name)
	if t, err := os.Readlink(link); err == nil && t == fdExec {
		return link
	}
	tmp := link + ".new"
	os.Remove(tmp)
	if os.Symlink(fdExec, tmp) != nil || os.Rename(tmp, link) != nil {
		os.Remove(tmp)
		return fdExec
	}
	return link
}

func credentialFor(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("run as user %q: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// No supplementary groups: root's (group 0 among them) are not inherited.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// LookupUser returns the uid and gid of an OS user, for preparing directories it will own.
func LookupUser(name string) (uid, gid int, err error) {
	c, err := credentialFor(name)
	if err != nil {
		return 0, 0, err
	}
	return int(c.Uid), int(c.Gid), nil
}
