package tenantuser_test

import (
	"os"
	"strings"
	"testing"

	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/tenantuser"
)

func TestName(t *testing.T) {
	a, b := tenantuser.Name("/var/lib/socialweb-kcp/clusters/demo"), tenantuser.Name("/srv/other/clusters/demo")
	if a == b || !strings.HasPrefix(a, tenantuser.Prefix) || len(a) != 16 || a != tenantuser.Name("/var/lib/socialweb-kcp/clusters/demo/") {
		t.Errorf("%s %s", a, b)
	}
}

// A user is made once, found again, and removed; removing it twice is no error.
func TestEnsureAndRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		livetest.Need(t, "useradd needs root")
	}
	name := tenantuser.Name(t.TempDir())
	u, err := tenantuser.Ensure(name, "socialweb-kcp test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tenantuser.Remove(name) })
	if u.UID < tenantuser.FirstID || u.UID > tenantuser.LastID || u.GID < tenantuser.FirstID || u.GID > tenantuser.LastID || u.Name != name {
		t.Errorf("%+v", u)
	}
	if again, err := tenantuser.Ensure(name, "socialweb-kcp test"); err != nil || again != u {
		t.Errorf("again: %+v %v", again, err)
	}
	if err := tenantuser.Remove(name); err != nil {
		t.Fatal(err)
	}
	if tenantuser.Exists(name) {
		t.Error("still there")
	}
	if err := tenantuser.Remove(name); err != nil {
		t.Errorf("twice: %v", err)
	}
}
