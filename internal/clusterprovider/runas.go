package clusterprovider

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/processrunner"
	"socialweb.computer/kcp/internal/tenantuser"
)

// runAs is who a cluster's processes run as. With tenant users (Config.TenantUsers) every
// component of the cluster, Postgres included, runs as the cluster's own OS user, which
// owns exactly the files its components read (Layout.ComponentFiles) and the directories
// they write in (Layout.ComponentDirs). Without, the components run as root and Postgres
// as the postgres user, as before tenant users existed.
type runAs struct {
	user *tenantuser.User
}

// postgres is the user Postgres and initdb run as.
func (r runAs) postgres() string {
	if r.user != nil {
		return r.user.Name
	}
	return clusterstack.PostgresUser
}

// components is the user every other component runs as ("": the provider's, root).
func (r runAs) components() string {
	if r.user != nil {
		return r.user.Name
	}
	return ""
}

// group is the DataDir's group: the one user that may traverse it besides root.
func (r runAs) group() (int, error) {
	if r.user != nil {
		return r.user.GID, nil
	}
	_, gid, err := processrunner.LookupUser(clusterstack.PostgresUser)
	return gid, err
}

// own lets the cluster's user read the component files of s that exist: root's, the
// user's group, 0640, so that it reads them and cannot change them (nodes.json is the
// provider's to write, invariant 10); kine's password file is the user's, 0600, as
// libpq wants it. A file appears at its first mint or write; a rewrite keeps its owner
// and its group's read (atomicfile's rule).
func (r runAs) own(s clusterstack.Spec) error {
	if r.user == nil {
		return nil
	}
	l := s.Layout()
	var errs []error
	for _, f := range l.ComponentFiles() {
		uid, mode := 0, os.FileMode(0o640)
		if f == l.KinePGPass() || f == l.ExternalPGPass() {
			uid, mode = r.user.UID, 0o600
		}
		fi, err := os.Lstat(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s: not a regular file", f)
		}
		if err == nil {
			err = os.Lchown(f, uid, r.user.GID)
		}
		if err == nil {
			err = os.Chmod(f, mode)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ownTree gives dir and everything in it to uid:gid, unless dir is theirs already: a
// DataDir made before tenant users, whose Postgres data the postgres user owns, passes
// to the cluster's user at its next start.
func ownTree(dir string, uid, gid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}
