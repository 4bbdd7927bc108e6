package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/auditlog"
	"socialweb.computer/kcp/internal/certrenewal"
	"socialweb.computer/kcp/internal/instancelease"
	"socialweb.computer/kcp/internal/placement"
)

// Bad command lines exit 2 and name what is wrong; a missing front exits 1 and says what
// to do; neither touches anything.
func TestExitCodesAndMessages(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "operator.kubeconfig")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"up"}, exitUsage, "want NAME"},
		{[]string{"up", "a", "b"}, exitUsage, "want NAME"},
		{[]string{"ls", "-o", "xml"}, exitUsage, `invalid argument "xml" for "-o, --output" flag: want name, wide, yaml or json`},
		{[]string{"nodes", "add", "demo", "zero"}, exitUsage, `COUNT "zero"`},
		{[]string{"up", "demo", "--nodes", "-1"}, exitUsage, "--nodes -1"},
		{[]string{"up", "demo", "--timeout", "soon"}, exitUsage, "--timeout"},
		{[]string{"frobnicate"}, exitUsage, "unknown command"},
		{[]string{"nodes", "rm", "demo"}, exitUsage, "want NAME ID..."},
		{[]string{"audit", "demo", "--tail", "0"}, exitUsage, "--tail 0: want a number of events"},
		{[]string{"audit", "demo", "-o", "yaml"}, exitUsage, "-o yaml: audit prints a table or json"},
		{[]string{"certs", "demo", "-o", "wide"}, exitUsage, "-o wide: certs prints a table or json"},
		{[]string{"ls", "--kubeconfig", missing}, exitFailed, "--kubeconfig " + missing + ": no such file or directory; start the provider first"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), "socialweb-kcp", c.args, &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
}

// The audit view: one row per event, oldest first; a non-resource request shows its path.
func TestAuditTable(t *testing.T) {
	at := time.Date(2026, 12, 5, 1, 2, 3, 0, time.UTC)
	var b bytes.Buffer
	if err := printAudit(&b, []auditlog.Event{
		{Time: at, User: "socialweb:tenant-admin", Verb: "create", Resource: "configmaps", Namespace: "default", Name: "web", Code: 201},
		{Time: at, User: "system:anonymous", Verb: "get", URI: "/version", Code: 403},
	}, outTable); err != nil {
		t.Fatal(err)
	}
	want := `TIME                  USER                    VERB    RESOURCE    NAMESPACE  NAME  CODE
2026-12-05T01:02:03Z  socialweb:tenant-admin  create  configmaps  default    web   201
2026-12-05T01:02:03Z  system:anonymous        get     /version    -          -     403
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// The certificates view: paths relative to the DataDir, soonest first as given, whole
// days left.
func TestCertsTable(t *testing.T) {
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	if err := printCerts(&b, "/data/demo", []certrenewal.Cert{
		{Path: "/data/demo/pki/apiserver.crt", Subject: "kube-apiserver", NotAfter: now.Add(30*24*time.Hour + time.Hour)},
		{Path: "/data/demo/pki/ca.crt", Subject: "demo-ca", CA: true, NotAfter: now.AddDate(10, 0, 0)},
	}, outTable, now); err != nil {
		t.Fatal(err)
	}
	want := `FILE               SUBJECT         KIND  EXPIRES               DAYS-LEFT
pki/apiserver.crt  kube-apiserver  leaf  2027-01-04T01:00:00Z  30
pki/ca.crt         demo-ca         CA    2036-12-05T00:00:00Z  3653
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// A front that does not answer is named, with what to do; the exit code is 1.
func TestAFrontThatDoesNotAnswer(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "front.kubeconfig")
	os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: f, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: f, user: u}}]
current-context: c
`), 0o600)
	var out, errb bytes.Buffer
	code := run(context.Background(), "socialweb-kcp", []string{"ls", "--kubeconfig", kc}, &out, &errb)
	if code != exitFailed || !strings.Contains(errb.String(), "the front at https://127.0.0.1:1 does not answer: is the provider running") {
		t.Errorf("exit %d: %s", code, errb.String())
	}
}

func TestClusterTable(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	cls := []v1alpha1.Cluster{{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default", CreationTimestamp: metav1.NewTime(now.Add(-3*time.Minute - 12*time.Second))},
		Spec:       v1alpha1.ClusterSpec{Account: "acme"},
		Status: v1alpha1.ClusterStatus{Phase: "Ready", URL: "https://127.0.0.1:30000", Nodes: 2,
			Conditions: []metav1.Condition{{Type: "Ready", Status: "True", Reason: "Ready", Message: "every component passed its gate"}}},
	}, {ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "default", CreationTimestamp: metav1.NewTime(now)}}, {
		ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: "default", CreationTimestamp: metav1.NewTime(now.Add(-2 * time.Hour))},
		Status:     v1alpha1.ClusterStatus{Phase: "Sleeping", LastActive: &metav1.Time{Time: now.Add(-20 * time.Minute)}},
	}}
	var b bytes.Buffer
	clusterTable(&b, cls, false, now)
	want := "NAME  PHASE     NODES  AGE    LAST-ACTIVE  URL\n" +
		"demo  Ready     2      3m12s  -            https://127.0.0.1:30000\n" +
		"new   -         0      0s     -            -\n" +
		"idle  Sleeping  0      120m   20m          -\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	clusterTable(&b, cls[:1], true, now)
	if f := strings.Fields(strings.Split(b.String(), "\n")[1]); len(f) < 9 || f[0] != "default" || f[7] != "acme" {
		t.Errorf("wide row: %q", f)
	}
}

// As the kubectl plugin kubectl-kcp, help speaks of "kubectl kcp"; under its own name of
// socialweb-kcp.
func TestPluginName(t *testing.T) {
	for argv0, want := range map[string]string{"/usr/local/bin/kubectl-kcp": "kubectl kcp", "bin/socialweb-kcp": "socialweb-kcp"} {
		var out bytes.Buffer
		if code := run(context.Background(), displayName(argv0), []string{"up", "--help"}, &out, &out); code != 0 {
			t.Fatalf("%s up --help: exit %d: %s", argv0, code, out.String())
		}
		if !strings.Contains(out.String(), want+" up NAME") {
			t.Errorf("%s up --help does not show %q:\n%s", argv0, want+" up NAME", out.String())
		}
	}
}

// -o name prints kubectl's resource.group/name, one per line; a table format is left to
// the caller.
func TestPrintStructuredName(t *testing.T) {
	var b bytes.Buffer
	cls := []v1alpha1.Cluster{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}}
	if done, err := printStructured(&b, outName, "cluster", clusterNames(cls...), list(cls)); !done || err != nil {
		t.Fatalf("done %v err %v", done, err)
	}
	if want := "cluster.socialweb.computer/a\ncluster.socialweb.computer/b\n"; b.String() != want {
		t.Errorf("-o name: %q; want %q", b.String(), want)
	}
	if done, _ := printStructured(&b, outWide, "cluster", nil, nil); done {
		t.Error("-o wide is a table: not printStructured's")
	}
}

func TestAge(t *testing.T) {
	// kubectl's own column: hours keep their minutes, days their hours, and years exist.
	for d, want := range map[time.Duration]string{-time.Second: "0s", 45 * time.Second: "45s", 119 * time.Second: "119s",
		3*time.Minute + 12*time.Second: "3m12s", 42 * time.Minute: "42m", 5*time.Hour + 30*time.Minute: "5h30m",
		77 * time.Hour: "3d5h", 3 * 365 * 24 * time.Hour: "3y", 400 * 24 * time.Hour: "400d"} {
		if got := Age(d); got != want {
			t.Errorf("Age(%s) = %s; want %s", d, got, want)
		}
	}
}

// up waits for Ready, and stops waiting on failures that waiting will not mend.
func TestUpVerdict(t *testing.T) {
	c := func(phase, reason string) v1alpha1.Cluster {
		cl := v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo"}, Status: v1alpha1.ClusterStatus{Phase: phase, Conditions: []metav1.Condition{{Type: "Ready", Reason: reason, Message: "m"}}}}
		if phase == "Ready" {
			cl.Status.URL = "https://x"
		}
		return cl
	}
	for _, tc := range []struct {
		c        v1alpha1.Cluster
		done, er bool
	}{
		{c("Initializing", "BringingUp"), false, false},
		{c("Ready", "Ready"), true, false},
		{c("Unavailable", "BringUpFailed"), false, true},
		{c("Unavailable", "LocalNameTaken"), false, true},
		{c("Unavailable", "BackingOff"), false, false},
		{c("Unavailable", "ComponentExited"), false, false},
	} {
		done, err := upVerdict(tc.c)
		if done != tc.done || (err != nil) != tc.er {
			t.Errorf("%s/%s: done %v err %v", tc.c.Status.Phase, readyReason(tc.c), done, err)
		}
	}
}

func TestProgressLine(t *testing.T) {
	p := progress{Phase: "Initializing", Message: "bring-up under way: kine ready"}
	if got := p.line(2500 * time.Millisecond); got != "   2.5s  Initializing  bring-up under way: kine ready" {
		t.Errorf("%q", got)
	}
	p = progress{Name: "demo-n1", Phase: "Ready"}
	if got := p.line(0); got != "   0.0s  demo-n1  Ready" {
		t.Errorf("%q", got)
	}
}

// The CLI's waits follow the front through watches (front.follow), never a polling loop:
// no command under cmd/ ticks, sleeps or polls.
func TestNoPollingLoopInTheCommands(t *testing.T) {
	files, err := filepath.Glob("../*/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("the commands' sources: %v %v", files, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, poll := range []string{"time.NewTicker(", "time.Tick(", "time.Sleep(", "wait.Poll", "PollUntil"} {
			if strings.Contains(string(b), poll) {
				t.Errorf("%s polls (%s): follow the front with a watch", f, poll)
			}
		}
	}
}

// hosts shows each instance's Lease: an expired one says so, an unlimited capacity is
// written out, CPU-FREE is idle cores, and BOUND counts the Clusters labelled for it, and
// an unlabelled one whose status names it (placement counts it there too).
func TestHostsTable(t *testing.T) {
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	leases := []instancelease.Lease{
		{Name: "host-a", Where: "a:/var/lib/socialweb", Renewed: now.Add(-3 * time.Second), Report: instancelease.Report{Capacity: 60, Running: 2, MemoryAvailable: 12 << 30, CPUIdle: 1375}},
		{Name: "host-b", Renewed: now.Add(-2 * time.Minute), Report: instancelease.Report{Capacity: placement.Unlimited, CPUIdle: -1}},
	}
	bound := boundCounts([]v1alpha1.Cluster{
		{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.InstanceLabel: "host-a"}}},
		{Status: v1alpha1.ClusterStatus{Instance: "host-a"}},
		{},
	})
	var b strings.Builder
	if err := hostsTable(&b, leases, bound, now); err != nil {
		t.Fatal(err)
	}
	want := `INSTANCE  LIVE          LEASE-AGE  BOUND  RUNNING  CAPACITY   MEMORY-FREE  CPU-FREE  WHERE
host-a    yes           3s         2      2        60         12.0Gi       1.38      a:/var/lib/socialweb
host-b    no (expired)  2m         0      0        unlimited  -            -         -
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
