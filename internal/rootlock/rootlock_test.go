package rootlock

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestASecondHolderIsRefusedNamingTheFirst(t *testing.T) {
	root := t.TempDir()
	l, err := Acquire(root)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(root) // a second open file description: flock conflicts even in one process
	var held *HeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrHeld) {
		t.Fatalf("second Acquire: %v, want a HeldError", err)
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("the error does not name the holder's pid: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(root)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	l2.Release()
	l2.Release() // idempotent
	if st, err := os.Stat(filepath.Join(root, FileName)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("lock file: %v, %v; want mode 0600", st, err)
	}
}

// A lock held by a process that is killed -9 is free again: the kernel drops it, so a crashed
// provider never blocks its successor.
func TestALockDiesWithItsHolder(t *testing.T) {
	if root := os.Getenv("ROOTLOCK_HOLD"); root != "" { // the child: hold, say so, wait
		if _, err := Acquire(root); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("held\n")
		select {}
	}
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestALockDiesWithItsHolder$")
	cmd.Env = append(os.Environ(), "ROOTLOCK_HOLD="+root)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("the child did not take the lock: %q, %v", line, err)
	}
	_, err = Acquire(root)
	if !strings.Contains(fmt.Sprint(err), "pid "+strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("while the child holds it: %v; want its pid named", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := Acquire(root)
	if err != nil {
		t.Fatalf("after its holder was killed: %v", err)
	}
	l.Release()
}
