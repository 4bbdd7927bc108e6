// Package livetest holds the one rule every live test follows (invariant 19): under
// SOCIALWEB_REQUIRE_LIVE=1 a live test that cannot run fails; otherwise it skips, saying
// why. It also finds the installed binaries and makes a data root Postgres can use.
package livetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/internal/guestnet"
	"socialweb.computer/kcp/internal/tenantuser"
)

// Port ranges: each package's live tests lease apiserver ports from ranges no other
// package uses, so that two packages may run at once (go test's default -p) without one
// provider binding a port another one leased: internal/clusterprovider 31000-31299,
// cmd/socialweb-clusterprovider 31300-31799 and 31900-31990, internal/faults 31800-31899,
// cmd/socialweb-kcp 32000-32099, bench/frontdoor 32100-32199, internal/leftovers
// 32200-32299 (leased, probed by a momentary bind), a long fault run by hand 32300-32399.
// All lie below the kernel's ephemeral ports (32768 and up): a port there can be taken by
// any outgoing connection while its apiserver restarts (portallocator.CheckNotEphemeral).

// Required reports whether live tests must run (CI sets SOCIALWEB_REQUIRE_LIVE=1).
func Required() bool { return os.Getenv("SOCIALWEB_REQUIRE_LIVE") == "1" }

// Need fails (when Required) or skips t because a live test cannot run.
func Need(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("live test cannot run: %s", why)
	}
	t.Skipf("live test skipped: %s (set SOCIALWEB_REQUIRE_LIVE=1 to make this a failure)", why)
}

// Start is the first call of a live test: under -short (deploy/check.sh --fast) it skips
// unless live tests are required, and it needs root, as Postgres runs as the postgres user.
func Start(t testing.TB) {
	t.Helper()
	if testing.Short() && !Required() {
		t.Skip("live test skipped under -short (deploy/check.sh --fast)")
	}
	if os.Getuid() != 0 {
		Need(t, "needs root (Postgres runs as the postgres user)")
	}
}

// BinDir is where the installed components are: SOCIALWEB_BIN_DIR, else the repository's
// bin/, found from the test's package directory.
func BinDir(t testing.TB) string {
	if dir := os.Getenv("SOCIALWEB_BIN_DIR"); dir != "" {
		return dir
	}
	wd, _ := os.Getwd()
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "bin")
		}
	}
	t.Fatalf("no go.mod above %s", wd)
	return ""
}

// DataRoot returns a fresh temp dir whose parents the postgres user and the tenants'
// users can traverse (as they can under /var/lib): t.TempDir's are 0700. Once the test is
// done (its provider stopped: cleanups run last in, first out), the tenant user of every
// cluster still under it is removed with it, as deleting the cluster would.
func DataRoot(t testing.TB) string {
	root := t.TempDir()
	for d := root; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o711)
	}
	t.Cleanup(func() {
		// A provider may leave its clusters running on purpose (serve --on-exit keep, or
		// killed with -9): a test that failed before its own teardown leaves none of them.
		if n := killMentioning(root + "/"); n > 0 {
			t.Logf("killed %d processes of %s left running", n, root)
		}
		dirs, _ := filepath.Glob(filepath.Join(root, "clusters", "*"))
		for _, d := range dirs {
			if err := tenantuser.Remove(tenantuser.Name(d)); err != nil {
				t.Errorf("remove the tenant user of %s: %v", d, err)
			}
		}
	})
	return root
}

// Eventually polls check until it holds or within has passed; the failure says what was
// last seen. Live tests wait on conditions with a deadline, never on a fixed sleep.
func Eventually(t testing.TB, within time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, seen := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last seen: %s", what, within, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PostgresBinary is the installed PostgreSQL server the live tests' clusters run.
const PostgresBinary = "/usr/lib/postgresql/15/bin/postgres"

// StackPrograms is every binary a provider starts for a cluster's groups, as argv[0]: what
// a live test scans /proc for (processrunner.FindByMarker) to find what runs.
func StackPrograms(bin string) []string {
	return []string{
		PostgresBinary, filepath.Join(bin, "kine"), filepath.Join(bin, "kube-control-plane"), filepath.Join(bin, "kube-apiserver"),
		filepath.Join(bin, "kube-controller-manager"), filepath.Join(bin, "kube-scheduler"),
		filepath.Join(bin, "socialweb-cloud-controller-manager"), filepath.Join(bin, "kwok"),
	}
}

// TenantPrograms is a tenant cluster's group as the provider starts it, one process of
// each (kwok with the first simulated guest): what a live test counts per cluster.
// StackPrograms has more: the front's, and the three a group of a provider before the
// one-process control plane ran.
func TenantPrograms(bin string) []string {
	return []string{
		PostgresBinary, filepath.Join(bin, "kine"), filepath.Join(bin, "kube-control-plane"),
		filepath.Join(bin, "socialweb-cloud-controller-manager"), filepath.Join(bin, "kwok"),
	}
}

// killMentioning kills, with its process group, every process whose arguments or
// environment mention marker, and returns how many it found.
func killMentioning(marker string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || pid <= 1 {
			continue
		}
		mentions := false
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
			mentions = mentions || err == nil && bytes.Contains(b, []byte(marker))
		}
		if mentions {
			n++
			syscall.Kill(-pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return n
}

// GuestNetworks is what guest networks the host has before a test makes its own, for its
// end to compare against (guestnet.LeftoversSince): a test binary killed earlier (a CI
// run cut short) leaves its networks behind, and they are not this test's to answer for.
func GuestNetworks(t *testing.T) []string {
	t.Helper()
	before, err := guestnet.Leftovers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(before) > 0 {
		t.Logf("guest networks on the host before this test (not its own): %v", before)
	}
	return before
}
