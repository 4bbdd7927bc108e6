package processrunner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/livetest"
)

// syncBuffer is an io.Writer safe for the runner's copy goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestEnvironmentIsExactlyTheSpec(t *testing.T) {
	t.Setenv("SOCIALWEB_TEST_INHERITED_SECRET", "leaked")
	var out syncBuffer
	err := Run(context.Background(), Spec{Argv: []string{"/usr/bin/env"}, Env: []string{"ONLY=this"}, Prefix: "env", Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "[env] ONLY=this" {
		t.Fatalf("child environment = %q, want only ONLY=this", got)
	}
}

func TestOutputLinesArePrefixedAndTailKept(t *testing.T) {
	var out syncBuffer
	err := Run(context.Background(), Spec{Argv: []string{"/bin/sh", "-c", "echo one; echo two >&2; exit 3"}, Prefix: "kine", Output: &out})
	if err == nil || !strings.Contains(err.Error(), "two") {
		t.Fatalf("a failing run's error = %v, want it to carry the output tail", err)
	}
	if !strings.Contains(out.String(), "[kine] one\n") || !strings.Contains(out.String(), "[kine] two\n") {
		t.Fatalf("output = %q", out.String())
	}
}

func TestStopReachesTheWholeProcessGroup(t *testing.T) {
	// The shell ignores SIGTERM and forks a sleep: only the group SIGKILL after the grace
	// ends both, which is what a component that forks (Postgres) needs.
	var out syncBuffer
	p, err := Start(Spec{Argv: []string{"/bin/sh", "-c", "trap '' TERM; /bin/sleep 300 & echo child $!; wait"}, Prefix: "sh", Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	var childPid int
	deadline := time.Now().Add(5 * time.Second)
	for childPid == 0 && time.Now().Before(deadline) {
		for _, l := range p.Tail() {
			if _, err := fmt.Sscanf(l, "child %d", &childPid); err == nil {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if childPid == 0 {
		t.Fatalf("no child pid in %q", out.String())
	}
	child, err := IdentityOf(childPid)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop(200 * time.Millisecond)
	select {
	case <-p.Exited():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	deadline = time.Now().Add(5 * time.Second)
	for child.Alive() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if child.Alive() {
		t.Fatal("the forked child outlived Stop")
	}
	p.Stop(time.Second) // idempotent
}

func TestRunsAsAnotherUser(t *testing.T) {
	u, err := user.Lookup("postgres")
	if err != nil || syscall.Getuid() != 0 {
		t.Skip("needs root and a postgres user")
	}
	var out syncBuffer
	if err := Run(context.Background(), Spec{Argv: []string{"/usr/bin/id", "-u"}, User: "postgres", Prefix: "id", Output: &out}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "[id] "+u.Uid {
		t.Fatalf("id -u = %q, want %s", got, u.Uid)
	}
	// With no supplementary group of root's, and from a binary in a directory the user
	// may not search (as a 0700 checkout's bin/): it is executed through a descriptor.
	dir := t.TempDir() // 0700 root
	b, err := os.ReadFile("/usr/bin/id")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/id", b, 0o755); err != nil {
		t.Fatal(err)
	}
	var groups syncBuffer
	if err := Run(context.Background(), Spec{Argv: []string{dir + "/id", "-G"}, User: "postgres", Prefix: "id", Output: &groups}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(groups.String()); got != "[id] "+u.Gid {
		t.Errorf("id -G = %q, want only the user's own group %s", got, u.Gid)
	}
	// Under its own name, not its descriptor's: top and the OOM killer's log say "cat".
	b, err = os.ReadFile("/bin/cat")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/cat", b, 0o755); err != nil {
		t.Fatal(err)
	}
	var comm syncBuffer
	if err := Run(context.Background(), Spec{Argv: []string{dir + "/cat", "/proc/self/comm"}, User: "postgres", Prefix: "cat", Output: &comm}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(comm.String()); got != "[cat] cat" {
		t.Errorf("comm %q, want cat", got)
	}
}

func TestIdentityTellsAReusedPidApart(t *testing.T) {
	p, err := Start(Spec{Argv: []string{"/bin/sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	id := p.Identity()
	if !id.Alive() || id.StartTime == 0 || id.Cmdline[0] != "/bin/sleep" {
		t.Fatalf("identity %+v not alive", id)
	}
	other := id
	other.StartTime++
	if other.Alive() {
		t.Fatal("an identity with another start time matched")
	}
	if err := id.Kill(0, time.Second); err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	if id.Alive() {
		t.Fatal("killed process still alive")
	}
}

func TestFindByMarkerMatchesOnlyOurPrograms(t *testing.T) {
	marker := "/tmp/socialweb-marker-" + t.Name() + "/"
	ours, err := Start(Spec{Argv: []string{"/bin/sh", "-c", "sleep 300", marker}})
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Stop(time.Second)
	foreign, err := Start(Spec{Argv: []string{"/bin/bash", "-c", "sleep 300", marker}})
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Stop(time.Second)
	// A component configured only by its environment (the CCM) is found by it.
	byEnv, err := Start(Spec{Argv: []string{"/bin/sh", "-c", "sleep 300; true"}, Env: []string{"SOME_FILE=" + marker + "nodes.json"}})
	if err != nil {
		t.Fatal(err)
	}
	defer byEnv.Stop(time.Second)
	want := []int{ours.Pid(), byEnv.Pid()}
	slices.Sort(want)
	// byEnv's shell forks its sleep: until that child has exec'd it is /bin/sh with the
	// marker in its environment, rightly found. Wait for it to become sleep; a foreign
	// program that matched would stay found until the deadline.
	livetest.Eventually(t, 10*time.Second, "only ours found by the marker (by argv and by environment, not the foreign program)", func() (bool, string) {
		ids, err := FindByMarker(marker, []string{"/bin/sh"})
		if err != nil {
			t.Fatal(err)
		}
		var pids []int
		for _, id := range ids {
			pids = append(pids, id.Pid)
		}
		slices.Sort(pids)
		return slices.Equal(pids, want), fmt.Sprintf("pids %v, want %v", pids, want)
	})
}

func TestConnectedToSeesAnEstablishedConnectionOfTheProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if ok, err := ConnectedTo(os.Getpid(), port); err != nil || ok {
		t.Fatalf("before any connection: %v, %v", ok, err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ok, err := ConnectedTo(os.Getpid(), port); err != nil || !ok {
		t.Fatalf("connected: ConnectedTo says %v, %v", ok, err)
	}
	if ok, _ := ConnectedTo(os.Getpid(), port+1); ok {
		t.Fatal("connected to another port, it says")
	}
}

func TestALogFileIsWrittenByTheProcessItself(t *testing.T) {
	log := t.TempDir() + "/c.log"
	os.WriteFile(log, []byte("an earlier run\n"), 0o600)
	p, err := Start(Spec{Argv: []string{"/bin/sh", "-c", "echo one; echo two >&2"}, LogFile: log})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	if b, _ := os.ReadFile(log); string(b) != "an earlier run\none\ntwo\n" {
		t.Fatalf("log %q: want the earlier run's line, then this process's", b)
	}
	if got := p.Tail(); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("tail %q, want this process's lines alone", got)
	}
	if fi, _ := os.Stat(log); fi.Mode().Perm() != 0o600 {
		t.Fatalf("log mode %v, want 0600", fi.Mode())
	}
	// Its own session: not the provider's, whose end (a terminal's hangup) it ignores.
	q, err := Start(Spec{Argv: []string{"/bin/sleep", "30"}, LogFile: log})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Stop(time.Second)
	if sid, _ := unixGetsid(q.Pid()); sid != q.Pid() {
		t.Fatalf("session %d, want its own (%d)", sid, q.Pid())
	}
}

func unixGetsid(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return strconv.Atoi(f[3]) // field 6: session
}

func TestAnAdoptedProcessIsWatchedUntilReleased(t *testing.T) {
	start := func() (*exec.Cmd, Identity) {
		cmd := exec.Command("/bin/sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		id, err := IdentityOf(cmd.Process.Pid)
		for err == nil && len(id.Cmdline) == 0 {
			id, err = IdentityOf(cmd.Process.Pid)
		}
		if err != nil {
			t.Fatal(err)
		}
		return cmd, id
	}
	cmd, id := start()
	p, err := Adopt(id, Spec{Argv: id.Cmdline}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("the adopted process's death was not seen")
	}
	// Released, it is watched no more: its death is no one's news.
	cmd, id = start()
	p, err = Adopt(id, Spec{Argv: id.Cmdline}, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case <-p.Exited():
		t.Fatal("a released process is still watched")
	case <-time.After(300 * time.Millisecond): // an absence: nothing to wait on
	}
	// A process that is not the recorded one is refused.
	id.StartTime++
	if _, err := Adopt(id, Spec{}, 0); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("adopting a gone process: %v, want ErrNotOurs", err)
	}
}
