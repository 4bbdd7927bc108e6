package clusterprovider

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/leftovers"
	"socialweb.computer/kcp/internal/processrunner"
	"socialweb.computer/kcp/internal/tenantuser"
)

// With tenant users, every process of a cluster runs as the cluster's own OS user, which
// can read neither another cluster's keys nor its own cluster's provider-only files, nor
// signal another cluster's processes; deleting the cluster removes the user and leaves no
// file of it.
func TestATenantsUserReachesNothingOfAnother(t *testing.T) {
	p, _ := liveProvider(t, func(c *Config) { c.TenantUsers = true })
	a, b := up(t, p, "user-a"), up(t, p, "user-b")
	ua, ub := tenantuser.Name(a.DataDir), tenantuser.Name(b.DataDir)
	if ua == ub || !tenantuser.Exists(ua) || !tenantuser.Exists(ub) {
		t.Fatalf("users %s and %s", ua, ub)
	}
	owner := map[*Cluster]string{a: ua, b: ub}
	var bAPIServer int
	for _, c := range []*Cluster{a, b} {
		ids, err := leftovers.Processes(c.DataDir, p.RequiredBinaries())
		if err != nil || len(ids) < 4 {
			t.Fatalf("%s's processes: %v %v", c.Name, ids, err)
		}
		for _, id := range ids {
			if got := uidOf(t, id.Pid); got != owner[c] {
				t.Errorf("%s's %s (pid %d) runs as %s, want %s", c.Name, filepath.Base(id.Cmdline[0]), id.Pid, got, owner[c])
			}
			if c == b && filepath.Base(id.Cmdline[0]) == "kube-control-plane" {
				bAPIServer = id.Pid
			}
		}
	}
	// The cluster works as its user: a write is stored and read back.
	kubectlOK(t, a, "create", "configmap", "as-its-user", "--from-literal=k=v")

	as := func(user string, argv ...string) (string, error) {
		var out bytes.Buffer
		err := processrunner.Run(context.Background(), processrunner.Spec{Argv: argv, User: user, Prefix: "as", Output: &out})
		return out.String(), err
	}
	for _, f := range []string{b.Spec.Layout().CAKey(), b.Spec.Layout().APIServerKey(), b.Spec.Layout().Log("kube-apiserver"), a.Spec.Layout().AdminKubeconfig(), a.Spec.Layout().PostgresSuperuserPassword()} {
		if out, err := as(ua, "/bin/cat", f); err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("as a's user, cat %s: %v %s; want Permission denied", f, err, out)
		}
	}
	if out, err := as(ua, "/bin/sh", "-c", "kill -0 "+strconv.Itoa(bAPIServer)); err == nil || !strings.Contains(out, "not permitted") {
		t.Errorf("as a's user, kill -0 b's apiserver (pid %d): %v %s; want Operation not permitted", bAPIServer, err, out)
	}
	if _, err := as(ua, "/bin/cat", a.Spec.Layout().CACert()); err != nil {
		t.Errorf("as a's user, its own CA certificate: %v", err)
	}
	// It reads its component files and may change none: nodes.json is the provider's to
	// write (invariant 10), and run/ holds the records only root may write.
	for _, f := range []string{a.Spec.Layout().NodesFile(), a.Spec.Layout().CACert(), filepath.Join(a.Spec.Layout().RunDir(), "planted.json")} {
		if out, err := as(ua, "/bin/sh", "-c", "echo x >> "+f); err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("as a's user, append to %s: %v %s; want Permission denied", f, err, out)
		}
	}

	// Deleting a removes its user, and no file owned by it is left.
	uid := lookupUID(t, ua)
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	if tenantuser.Exists(ua) {
		t.Errorf("a's user %s outlived its cluster", ua)
	}
	for _, root := range []string{filepath.Dir(filepath.Dir(a.DataDir)), os.TempDir(), "/var/tmp", "/run", "/dev/shm"} {
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid {
					t.Errorf("%s is still owned by a's user (uid %d)", path, uid)
				}
			}
			return nil
		})
	}
}

// uidOf is the user name a process runs as (its real uid).
func uidOf(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
			uid, _ := strconv.Atoi(f[1])
			return userName(uid)
		}
	}
	return ""
}

func userName(uid int) string {
	b, _ := os.ReadFile("/etc/passwd")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, ":"); len(f) > 2 && f[2] == strconv.Itoa(uid) {
			return f[0]
		}
	}
	return strconv.Itoa(uid)
}

func lookupUID(t *testing.T, name string) int {
	uid, _, err := processrunner.LookupUser(name)
	if err != nil {
		t.Fatal(err)
	}
	return uid
}

// kubectlOK runs kubectl against c as its tenant.
func kubectlOK(t *testing.T, c *Cluster, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := processrunner.Run(ctx, processrunner.Spec{Argv: append([]string{filepath.Join(binDir(t), "kubectl"), "--kubeconfig", c.TenantKubeconfig}, args...), Prefix: "kubectl", Output: &out})
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out.String())
	}
}
