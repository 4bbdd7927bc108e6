// Package pgtemplate makes a new cluster's PostgreSQL data directory by copying a template
// instead of running initdb for each one: initdb takes about half a second of a fresh
// bring-up, a copy and a password set in single-user mode about a tenth of that
// (docs/benchmarks.md, "Density and speed").
//
// A template holds what initdb makes and nothing more: no role of ours, no database of
// kine's, no Kubernetes object (each cluster's UIDs, such as kube-system's, are made by its
// own apiserver). What every copy shares is initdb's output itself, the system identifier
// in pg_control included: PostgreSQL uses it to match WAL to its cluster, so a WAL archive
// (none is kept today) would have to be kept per cluster by name, not trusted to tell them
// apart. The superuser's password is set per copy, before its server first starts.
//
// A template is root's once made: the user initdb ran as (the postgres user every tenant's
// Postgres shares without tenant users) could otherwise plant a role or a setting in every
// data directory made after. The provider never follows a link in either tree.
package pgtemplate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Key names a template by what makes it: initdb's argv without the paths that differ per
// run (the data directory and the password file), and what else the caller names (the
// initdb binary's pin, so that another PostgreSQL at the same path makes another template).
func Key(initdbArgv []string, more ...string) string {
	h := sha256.New()
	for _, a := range append(append([]string{}, initdbArgv...), more...) {
		if strings.HasPrefix(a, "--pgdata=") || strings.HasPrefix(a, "--pwfile=") {
			continue
		}
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// prefix names every template directory under the templates directory.
const prefix = "postgres-"

// ensureMu serialises the making of templates: two bring-ups at once make one.
var ensureMu sync.Mutex

// Ensure returns the template of key under templates, made if it is not there: initdb,
// run as uid:gid, makes a data directory in the (empty, uid:gid-owned) directory it is
// given; it becomes the template only when it is whole, root's and on disk. A half-made
// one from an interrupted run, and templates of other keys (another PostgreSQL, other
// settings), are removed.
func Ensure(ctx context.Context, templates, key string, uid, gid int, initdb func(ctx context.Context, dataDir string) error) (string, error) {
	ensureMu.Lock()
	defer ensureMu.Unlock()
	dir := filepath.Join(templates, prefix+key)
	if fi, err := os.Lstat(filepath.Join(dir, "PG_VERSION")); err == nil && ownedByRoot(fi) {
		if top, err := os.Lstat(dir); err == nil && top.IsDir() && ownedByRoot(top) {
			return dir, nil
		}
	}
	// The parent is root's; initdb, run as uid, only needs to pass through it.
	if err := os.MkdirAll(templates, 0o711); err != nil {
		return "", err
	}
	if err := removeOthers(templates, ""); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(templates, ".new-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // gone once renamed
	if err := os.Chown(tmp, uid, gid); err != nil {
		return "", err
	}
	if err := initdb(ctx, tmp); err != nil {
		return "", fmt.Errorf("postgres template: %w", err)
	}
	// root's and 0700 from the top down: once the top is, initdb's user cannot reach below
	// it by path (whatever modes it gave what is below; Copy does not carry them).
	if err := os.Lchown(tmp, 0, 0); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o700); err != nil { // tmp is root's own entry: no link
		return "", err
	}
	if err := filepath.WalkDir(tmp, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, 0, 0)
	}); err != nil {
		return "", err
	}
	if err := syncfs(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, removeOthers(templates, dir)
}

// removeOthers removes half-made templates, and with keep set every template but keep.
func removeOthers(templates, keep string) error {
	ents, err := os.ReadDir(templates)
	if err != nil {
		return err
	}
	for _, e := range ents {
		path := filepath.Join(templates, e.Name())
		stale := strings.HasPrefix(e.Name(), ".new-") || (keep != "" && strings.HasPrefix(e.Name(), prefix) && path != keep)
		if stale {
			if err := os.RemoveAll(path); err != nil {
				return err
			}
		}
	}
	return nil
}

func ownedByRoot(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0
}

// Copy copies the template src into dst, which must not exist and whose parent only root
// may write, every entry owned by uid:gid with its mode kept. dst itself stays root's, so
// that nothing of uid's can reach the tree while root writes it; the caller hands it over
// (Own) when it is whole. A failed copy is removed.
func Copy(src, dst string, uid, gid int) (err error) {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("postgres data directory %s exists already", dst)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
		}
	}()
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		// initdb (without group access) makes 0700 directories and 0600 files; nothing
		// wider is carried into a copy, whatever the template's modes became.
		mode := info.Mode().Perm() & 0o700
		if !d.IsDir() {
			mode &= 0o600
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			if path == src {
				return os.Chmod(target, mode) // root's until Own
			}
			if err := os.Chmod(target, mode); err != nil { // Mkdir is subject to the umask
				return err
			}
			return os.Lchown(target, uid, gid)
		case d.Type().IsRegular():
			return copyFile(path, target, mode, uid, gid)
		default:
			// initdb makes directories and files only; anything else is not initdb's.
			return fmt.Errorf("postgres template: %s is neither a file nor a directory", path)
		}
	})
}

// Own hands dst, a Copy, to uid:gid.
func Own(dst string, uid, gid int) error { return os.Lchown(dst, uid, gid) }

// copyFile copies src to a new dst, never through a link, and sets its mode and owner on
// the open file.
func copyFile(src, dst string, mode fs.FileMode, uid, gid int) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chmod(mode)
	}
	if err == nil {
		err = out.Chown(uid, gid)
	}
	return errors.Join(err, out.Close())
}

// Sync writes out the filesystem holding dir: its files, one call for a thousand. dir must
// be one only root can reach (the staging copy).
func Sync(dir string) error { return syncfs(dir) }

func syncfs(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return errors.Join(fmt.Errorf("sync %s", dir), err)
	}
	return nil
}
