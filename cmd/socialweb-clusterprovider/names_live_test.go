package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/localname"
	"socialweb.computer/kcp/internal/processrunner"
)

// beforeLocalNames is the last commit whose provider knew clusters by name alone, unique
// on the front: the provider an upgrade to local names starts from.
const beforeLocalNames = "2139de7714470cd6aa92574c519e9f551323c071"

// A Cluster's name is unique per namespace (issue 15, item 5). First an upgrade: a serve
// from before local names runs a cluster in a namespace other than default; the new serve
// takes over, adopts it (the same processes), records its bare name as its local name, and
// its tenant's kubeconfig from before keeps working through the front door, where it is
// now also <cluster>.<namespace>.<base-domain>. Then two accounts each create prod, beside
// default's prod: all three Ready, each tenant reaches its own through the front door from
// another host, each at its own name; a local name removed by hand comes back, the cluster
// untouched; one changed by hand is set back; a copy of default's prod in another
// namespace, bound and named as it is, is refused (LocalNameTaken) and, deleted, takes
// nothing of default's; deleting one prod leaves the others running.
func TestNamesPerNamespace(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	old := buildAt(t, beforeLocalNames, "./cmd/socialweb-clusterprovider")
	other := livetest.OtherHost(t, "web.kcp.test", "web.acct-b.kcp.test", "prod.kcp.test", "prod.default.kcp.test",
		"prod.acct-a.kcp.test", "prod.acct-b.kcp.test")
	root := livetest.DataRoot(t)
	const ports = "31700-31749"
	// A fixed port on the other host's address (no other test's): the kubeconfigs name it,
	// and they must work across the restart.
	door := []string{"--front-door", other.HostIP + ":6443", "--base-domain", "kcp.test"}
	r, kubectl, _ := startServeWith(t, old, bin, root, ports, append([]string{"--on-exit", "keep"}, door...)...)
	dir := t.TempDir()
	kubeconfig := func(ns, name string) string {
		t.Helper()
		raw, err := base64.StdEncoding.DecodeString(kubectl("get", "secret", "-n", ns, name+"-kubeconfig", "-o", "jsonpath={.data.kubeconfig}"))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, ns+"-"+name+".kubeconfig")
		os.WriteFile(path, raw, 0o600)
		return path
	}
	// kubectl on the other host, with a tenant's kubeconfig.
	there := func(kc string, args ...string) (string, error) {
		out, err := other.Command(append([]string{filepath.Join(bin, "kubectl"), "--kubeconfig", kc, "--request-timeout", "60s"}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	field := func(ns, name, path string) string {
		return kubectl("get", "clusters", "-n", ns, name, "-o", "jsonpath="+path)
	}
	ready := func(ns, name, url string) {
		t.Helper()
		eventually(t, 4*time.Minute, "Cluster "+ns+"/"+name+" Ready at "+url, func() (bool, string) {
			out := field(ns, name, "{.status.phase} {.status.url}")
			return out == "Ready "+url, out
		})
	}
	apiserver := func(local string) int {
		t.Helper()
		// kube-apiserver where the provider before the upgrade started it (adopted as it
		// runs), kube-control-plane where this one did.
		ids, _ := processrunner.FindByMarker(clusterprovider.DataDirOf(root, local)+"/", []string{filepath.Join(bin, "kube-apiserver"), filepath.Join(bin, "kube-control-plane")})
		if len(ids) != 1 {
			t.Fatalf("apiservers of %s: %v, want one", local, ids)
		}
		return ids[0].Pid
	}
	kubectl("create", "namespace", "acct-a")
	kubectl("create", "namespace", "acct-b")
	kubectl("create", "namespace", "acct-c")

	parent := t // the new serve outlives the subtest that starts it
	t.Run("an upgrade keeps every cluster where it was", func(t *testing.T) {
		apply(t, kubectl, "apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: web, namespace: acct-b}\nspec: {account: b}\n")
		ready("acct-b", "web", "https://web.kcp.test:6443")
		before := kubeconfig("acct-b", "web")
		if out, err := there(before, "create", "configmap", "whoami", "--from-literal=cluster=web"); err != nil {
			t.Fatalf("before the upgrade, through the front door: %v\n%s", err, out)
		}
		pid := apiserver("web") // the provider from before keyed it by its name alone
		r.Cmd.Process.Signal(syscall.SIGTERM)
		r.WaitLine(t, "stopped; the clusters run on")
		r.Cmd.Wait()

		r, kubectl, _ = startServeWith(parent, exe, bin, root, ports, door...)
		eventually(t, 2*time.Minute, "acct-b/web's local name recorded", func() (bool, string) {
			out := field("acct-b", "web", "{.metadata.annotations.socialweb\\.computer/local-name} {.status.phase}")
			return out == "web Ready", out
		})
		if now := apiserver("web"); now != pid {
			t.Errorf("the upgrade restarted acct-b/web's apiserver: pid %d, then %d", pid, now)
		}
		if out, err := there(before, "get", "configmap", "whoami", "-o", "jsonpath={.data.cluster}"); err != nil || out != "web" {
			t.Errorf("the kubeconfig from before the upgrade: %q, %v", out, err)
		}
		// Its name by namespace too, once its serving certificate carries it.
		eventually(t, 2*time.Minute, "acct-b/web at web.acct-b.kcp.test", func() (bool, string) {
			out, err := there(before, "--server", "https://web.acct-b.kcp.test:6443", "--request-timeout", "10s", "get", "configmap", "whoami", "-o", "jsonpath={.data.cluster}")
			return err == nil && out == "web", out
		})
	})

	t.Run("two accounts each create prod", func(t *testing.T) {
		var manifest strings.Builder
		for _, ns := range []string{"default", "acct-a", "acct-b"} {
			fmt.Fprintf(&manifest, "apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: prod, namespace: %s}\nspec: {account: %s}\n---\n", ns, ns)
		}
		apply(t, kubectl, manifest.String())
		urls := map[string]string{"default": "https://prod.kcp.test:6443", "acct-a": "https://prod.acct-a.kcp.test:6443", "acct-b": "https://prod.acct-b.kcp.test:6443"}
		locals := map[string]string{"default": "prod", "acct-a": localname.Hashed("acct-a", "prod", 0), "acct-b": localname.Hashed("acct-b", "prod", 0)}
		kc := map[string]string{}
		for ns, url := range urls {
			ready(ns, "prod", url)
			if got := field(ns, "prod", "{.metadata.annotations.socialweb\\.computer/local-name}"); got != locals[ns] {
				t.Errorf("%s/prod's local name %q, want %q", ns, got, locals[ns])
			}
			kc[ns] = kubeconfig(ns, "prod")
			if out, err := there(kc[ns], "create", "configmap", "whoami", "--from-literal=account="+ns); err != nil {
				t.Fatalf("create a ConfigMap in %s/prod through the front door: %v\n%s", ns, err, out)
			}
		}
		for ns := range urls {
			if out, err := there(kc[ns], "get", "configmap", "whoami", "-o", "jsonpath={.data.account}"); err != nil || out != ns {
				t.Errorf("through %s/prod's kubeconfig, whoami = %q, %v; want %s", ns, out, err, ns)
			}
		}
		// default's prod is also at its name under the namespace.
		if out, err := there(kc["default"], "--server", "https://prod.default.kcp.test:6443", "get", "configmap", "whoami", "-o", "jsonpath={.data.account}"); err != nil || out != "default" {
			t.Errorf("prod.default.kcp.test: %q, %v", out, err)
		}

		// A local name removed by hand comes back as it was: the cluster is not touched.
		pid := apiserver(locals["acct-b"])
		kubectl("annotate", "clusters", "-n", "acct-b", "prod", v1alpha1.LocalNameAnnotation+"-")
		eventually(t, time.Minute, "acct-b/prod's local name back", func() (bool, string) {
			got := field("acct-b", "prod", "{.metadata.annotations.socialweb\\.computer/local-name}")
			return got == locals["acct-b"], got
		})
		if now := apiserver(locals["acct-b"]); now != pid {
			t.Errorf("acct-b/prod's apiserver: pid %d, then %d", pid, now)
		}

		// A local name changed by hand, to another Cluster's: set back to its own, and that
		// other is not touched.
		pid = apiserver("prod")
		kubectl("annotate", "--overwrite", "clusters", "-n", "acct-a", "prod", v1alpha1.LocalNameAnnotation+"=prod")
		eventually(t, time.Minute, "acct-a/prod's local name set back", func() (bool, string) {
			got := field("acct-a", "prod", "{.metadata.annotations.socialweb\\.computer/local-name}")
			return got == locals["acct-a"], got
		})
		// A copy of default's prod in another namespace, bound and named as it is (as a
		// restore of the front's objects would make it): refused, and deleted, it takes
		// nothing of default's with it.
		instance := field("default", "prod", "{.metadata.labels.socialweb\\.computer/instance}")
		apply(t, kubectl, fmt.Sprintf("apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: prod, namespace: acct-c, labels: {socialweb.computer/instance: %s}, annotations: {socialweb.computer/local-name: prod}}\nspec: {account: acct-c}\n", instance))
		eventually(t, time.Minute, "acct-c/prod refused", func() (bool, string) {
			out := field("acct-c", "prod", `{.status.conditions[?(@.type=="Ready")].reason}`)
			return out == clusterprovider.LocalNameTaken, out
		})
		kubectl("delete", "clusters", "-n", "acct-c", "prod", "--wait=true", "--timeout=60s")
		if now := apiserver("prod"); now != pid {
			t.Errorf("default/prod's apiserver after a copy named it: pid %d, then %d", pid, now)
		}
		for _, ns := range []string{"default", "acct-a"} {
			if out, err := there(kc[ns], "get", "configmap", "whoami", "-o", "jsonpath={.data.account}"); err != nil || out != ns {
				t.Errorf("%s/prod after the copy came and went: %q, %v", ns, out, err)
			}
		}

		kubectl("delete", "clusters", "-n", "acct-a", "prod", "--wait=true", "--timeout=120s")
		if _, err := os.Stat(clusterprovider.DataDirOf(root, locals["acct-a"])); !os.IsNotExist(err) {
			t.Errorf("acct-a/prod's DataDir after its deletion: %v", err)
		}
		for _, ns := range []string{"default", "acct-b"} {
			if out, err := there(kc[ns], "get", "configmap", "whoami", "-o", "jsonpath={.data.account}"); err != nil || out != ns {
				t.Errorf("after acct-a/prod went, %s/prod: %q, %v", ns, out, err)
			}
		}
		if out, err := there(kc["acct-a"], "get", "ns"); err == nil || !strings.Contains(out, "unrecognized name") {
			t.Errorf("acct-a/prod's name after its deletion: %v\n%s\nwant unrecognized name", err, out)
		}
	})
}

// buildAt builds pkg as it was at commit, from this repository's history: an earlier
// release, for a test of the upgrade from it.
func buildAt(t *testing.T, commit, pkg string) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		livetest.Need(t, "not a git checkout: the provider from before is built from the history")
	}
	src := t.TempDir()
	archive := exec.Command("bash", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "archive", strings.TrimSpace(string(top)), commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		livetest.Need(t, fmt.Sprintf("commit %s is not in this checkout's history (%v: %s)", commit, err, out))
	}
	exe := filepath.Join(t.TempDir(), filepath.Base(pkg))
	build := exec.Command("go", "build", "-o", exe, pkg)
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s at %s: %v\n%s", pkg, commit, err, out)
	}
	return exe
}
