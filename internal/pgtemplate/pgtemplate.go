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

	"golang.org/x/sys/unix"
)

// Key names a template by what made it: initdb's argv without the paths that differ per
// run (the data directory and the password file). Another PostgreSQL, or other initdb
// settings, is another template.
func Key(initdbArgv []string) string {
	h := sha256.New()
	for _, a := range initdbArgv {
		if strings.HasPrefix(a, "--pgdata=") || strings.HasPrefix(a, "--pwfile=") {
			continue
		}
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// ensureMu serialises the making of templates: two bring-ups at once make one.
var ensureMu sync.Mutex

// Ensure makes the template at dir once: initdb makes a data directory in the (empty,
// uid:gid-owned) directory it is given, which becomes dir only when it is whole and on
// disk. A half-made one from an interrupted run is made again.
func Ensure(ctx context.Context, dir string, uid, gid int, initdb func(ctx context.Context, dataDir string) error) error {
	ensureMu.Lock()
	defer ensureMu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return nil
	}
	// The parent is root's; initdb, run as uid, only needs to pass through it.
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	tmp := dir + ".new"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if err := os.Chown(tmp, uid, gid); err != nil {
		return err
	}
	if err := initdb(ctx, tmp); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("postgres template: %w", err)
	}
	if err := syncfs(tmp); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// Copy copies the template src into dst, which must not exist, every entry owned by
// uid:gid with its mode kept, and makes the copy durable before it returns: a data
// directory whose files a power cut could still lose is not one to start a server on. A
// failed copy is removed.
func Copy(src, dst string, uid, gid int) (err error) {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("postgres data directory %s exists already", dst)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
		}
	}()
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
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
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			// initdb makes directories and files only; anything else is not initdb's.
			return fmt.Errorf("postgres template: %s is neither a file nor a directory", path)
		}
		if err := os.Lchown(target, uid, gid); err != nil {
			return err
		}
		// Mkdir and OpenFile are subject to the umask; the template's modes are kept.
		return os.Chmod(target, info.Mode().Perm())
	})
	if err != nil {
		return err
	}
	return syncfs(dst)
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// syncfs writes out the filesystem holding dir: one call for a thousand files.
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
