// Package tenantuser gives each tenant cluster an OS user of its own, which every one of
// its processes runs as (Postgres, kine, the Kubernetes components, the CCM, kwok): a
// process of cluster A can then neither read cluster B's DataDir, keys and logs, nor
// signal B's processes, whatever A's components are made to do.
package tenantuser

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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

// Prefix starts every tenant user's name, so that an operator (ps, ls -l) tells them apart.
const Prefix = "swk-"

// Name is the user of the cluster whose DataDir is dataDir: the prefix and a hash of the
// DataDir's absolute path, so that two providers on one host (another data root) never
// share a user, and a cluster's user outlives a provider restart. 16 characters: within
// every system's limit on user names.
func Name(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return Prefix + hex.EncodeToString(sum[:6])
}

// User is a tenant's OS user.
type User struct {
	Name     string
	UID, GID int
}

// useradd serialises our own calls: useradd and userdel lock /etc/passwd and fail, not
// wait, when another holds it.
var useradd sync.Mutex

// Ensure makes the user (a system user with a group of its own, no home, no shell) unless
// it exists, and returns it. comment is put in its passwd entry (the cluster's name and
// DataDir), for an operator reading getent.
func Ensure(name, comment string) (User, error) {
	if u, err := lookup(name); err == nil {
		return u, nil
	}
	useradd.Lock()
	defer useradd.Unlock()
	if u, err := lookup(name); err == nil {
		return u, nil
	}
	err := retry(func() error {
		return run("useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
			"--shell", "/usr/sbin/nologin", "--comment", comment,
			"-K", "SYS_UID_MIN="+strconv.Itoa(FirstID), "-K", "SYS_UID_MAX="+strconv.Itoa(LastID),
			"-K", "SYS_GID_MIN="+strconv.Itoa(FirstID), "-K", "SYS_GID_MAX="+strconv.Itoa(LastID), name)
	})
	if err != nil {
		return User{}, fmt.Errorf("tenant user %s: %w", name, err)
	}
	return lookup(name)
}

// FirstID and LastID bound the tenant users' uids and gids: a range of their own, apart
// from the system's services (below 1000) and its people (from 1000), for 100,000
// clusters.
const (
	FirstID = 200000
	LastID  = 299999
)

// Remove removes the user and its group, and what it left in /dev/shm (Postgres' dynamic
// shared memory, when it was killed): nothing owned by its uid passes to a later user the
// uid is given to. A user that does not exist is no error.
func Remove(name string) error {
	useradd.Lock()
	defer useradd.Unlock()
	u, err := lookup(name)
	if err != nil {
		return nil
	}
	if entries, err := os.ReadDir("/dev/shm"); err == nil {
		for _, e := range entries {
			p := filepath.Join("/dev/shm", e.Name())
			if fi, err := os.Lstat(p); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == u.UID {
					os.Remove(p)
				}
			}
		}
	}
	if err := retry(func() error { return run("userdel", name) }); err != nil {
		return fmt.Errorf("tenant user %s: %w", name, err)
	}
	return nil
}

// Exists says whether the user is in the user database.
func Exists(name string) bool {
	_, err := lookup(name)
	return err == nil
}

func lookup(name string) (User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return User{}, err
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return User{}, err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return User{}, err
	}
	return User{Name: name, UID: uid, GID: gid}, nil
}

func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", argv[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// retry runs f again while another process holds the user database ("cannot lock
// /etc/passwd; try again later"), for up to 10 s.
func retry(f func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		var ee *exec.ExitError
		if err == nil || !errors.As(err, &ee) || !strings.Contains(err.Error(), "lock") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
