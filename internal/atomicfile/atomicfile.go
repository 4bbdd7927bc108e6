// Package atomicfile writes files that another process reads (kubeconfigs, configs, lease
// books, process records) so that a reader sees either the old content or the new, never a
// torn write (invariant 5). A failed write is returned, never swallowed.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// WriteFile writes data to path with mode perm: a temp file in the same directory, fsync,
// chmod, rename over path, then fsync of the directory so the rename survives a crash. A
// file it replaces keeps its owner and group, and its group's read (when we may give
// them: as root): a key or a snapshot a tenant's user reads stays readable by it when the
// provider rewrites it.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	name := tmp.Name()
	fail := func(err error) error {
		tmp.Close()
		os.Remove(name)
		return fmt.Errorf("write %s: %w", path, err)
	}
	read, err := keepOwner(tmp, path)
	if err != nil {
		return fail(err)
	}
	if err := tmp.Chmod(perm | read); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: sync dir: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write %s: sync dir: %w", path, err)
	}
	return nil
}

// keepOwner gives tmp the owner and group of the regular file at path, if there is one
// and they are not ours, and returns its group's read bit, to be kept too.
func keepOwner(tmp *os.File, path string) (os.FileMode, error) {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || os.Geteuid() != 0 {
		return 0, nil // a new file (or a link: never followed), or one we could not give away
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() && int(st.Gid) == os.Getegid() {
		return 0, nil
	}
	return fi.Mode().Perm() & 0o040, tmp.Chown(int(st.Uid), int(st.Gid))
}

// SyncDir writes dir's entries to disk (fsync of the directory, opened without following
// a link): a file or directory made or renamed in it is there after a crash.
func SyncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}
