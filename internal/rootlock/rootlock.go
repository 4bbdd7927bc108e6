// Package rootlock makes one provider at a time the owner of a data root (invariant 26): an
// exclusive flock(2) on <data-root>/provider.lock, held for as long as the provider runs.
// The kernel drops it when the process dies, kill -9 included, so a crashed provider never
// leaves a lock its successor must clean up. The file records the holder's pid and command
// line so that a refused provider can say who holds the root.
package rootlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FileName is the lock file's name in the data root.
const FileName = "provider.lock"

// ErrHeld: another process holds the data root.
var ErrHeld = errors.New("data root is held by another provider:")

// HeldError names the holder of a data root.
type HeldError struct {
	Root   string
	Holder string // "pid 1234 (socialweb-clusterprovider serve ...)", or what could be read
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s: %s %s", e.Root, ErrHeld, e.Holder)
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// Lock is a held data root.
type Lock struct{ f *os.File }

// Acquire takes the data root's lock without waiting: held by another process, it fails at
// once with a HeldError and touches nothing.
func Acquire(root string) (*Lock, error) {
	path := filepath.Join(root, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data root lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &HeldError{Root: root, Holder: describe(strings.TrimSpace(string(b)))}
		}
		return nil, fmt.Errorf("data root lock %s: %w", path, err)
	}
	// The holder's pid, for the next one's error. Written in place (not by rename, which
	// would make a new inode that nobody has locked).
	self := fmt.Sprintf("%d %s\n", os.Getpid(), strings.Join(os.Args, " "))
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(self), 0)
	}
	return &Lock{f: f}, nil
}

// describe turns the lock file's "PID ARGV" into words, checking the pid is alive.
func describe(content string) string {
	pidText, argv, _ := strings.Cut(content, " ")
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		return "a process that recorded no pid"
	}
	if argv == "" {
		return fmt.Sprintf("pid %d", pid)
	}
	return fmt.Sprintf("pid %d (%s)", pid, argv)
}

// Release lets the data root go. It is idempotent.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	return err
}
