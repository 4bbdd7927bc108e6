package tenantuser

import (
	"os"
	"strings"
	"testing"

	"socialweb.computer/kcp/internal/livetest"
)

func TestName(t *testing.T) {
	a, b := Name("/var/lib/socialweb-kcp/clusters/demo"), Name("/srv/other/clusters/demo")
	if a == b || !strings.HasPrefix(a, Prefix) || len(a) != 16 || a != Name("/var/lib/socialweb-kcp/clusters/demo/") {
		t.Errorf("%s %s", a, b)
	}
}

// A user is made once, found again, and removed; removing it twice is no error.
func TestEnsureAndRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		livetest.Need(t, "useradd needs root")
	}
	name := Name(t.TempDir())
	u, err := Ensure(name, "socialweb-kcp test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(name) })
	if u.UID < FirstID || u.UID > LastID || u.GID < FirstID || u.GID > LastID || u.Name != name {
		t.Errorf("%+v", u)
	}
	if again, err := Ensure(name, "socialweb-kcp test"); err != nil || again != u {
		t.Errorf("again: %+v %v", again, err)
	}
	if err := Remove(name); err != nil {
		t.Fatal(err)
	}
	if Exists(name) {
		t.Error("still there")
	}
	if err := Remove(name); err != nil {
		t.Errorf("twice: %v", err)
	}
}
