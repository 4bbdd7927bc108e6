package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/externaldb"
	"socialweb.computer/kcp/internal/livetest"
	"socialweb.computer/kcp/internal/processrunner"
)

// failoverBound is how long a cluster on the external datastore may take to be Ready on
// another instance after its instance's host is lost: the Lease's 30 s to expire, a look
// every 2 s, and a bring-up (about 10 s here), with room for a busy machine.
const failoverBound = 150 * time.Second

// An external PostgreSQL server (TLS, passwords), a front of its own instance, and two
// instances that reach the server. A Cluster with spec.datastore external and a ConfigMap;
// then kill -9 of its instance and every process of that instance (its host is gone): the
// other instance takes the cluster over within failoverBound and its ConfigMap is there,
// through the kubeconfig delivered again; the password the lost instance's kine held is
// refused by the server (the fence). The lost instance, started again, runs nothing of
// the cluster and keeps nothing of it. Deleting the cluster drops its database.
func TestAnExternalClusterSurvivesTheLossOfItsHost(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	dsFile, srv := livetest.ExternalPostgres(t, clusterstack.DefaultPostgresBin)
	rootF := livetest.DataRoot(t)
	roots := map[string]string{"host-a": livetest.DataRoot(t), "host-b": livetest.DataRoot(t)}
	ports := map[string]string{"host-a": "31910-31929", "host-b": "31930-31949"}
	_, kubectl, _ := startServeWith(t, exe, bin, rootF, "31900-31909", "--instance", "front", "--capacity", "clusters=0")
	front := filepath.Join(rootF, "operator.kubeconfig")
	serveAs := func(instance string) *livetest.Proc {
		p, _, _ := livetest.Serve(t, exe, bin, roots[instance], ports[instance], "--front-kubeconfig", front, "--instance", instance, "--external-datastore", dsFile)
		return p
	}
	serving := map[string]*livetest.Proc{"host-a": serveAs("host-a"), "host-b": serveAs("host-b")}

	manifest := filepath.Join(t.TempDir(), "ext.yaml")
	os.WriteFile(manifest, []byte("apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: ext, namespace: default}\nspec: {account: acme, datastore: external}\n"), 0o600)
	kubectl("apply", "-f", manifest)
	state := func() string {
		return kubectl("get", "clusters", "ext", "-o", `jsonpath={.status.phase} {.status.instance} {.metadata.labels.socialweb\.computer/instance}`)
	}
	var owner string
	eventually(t, 4*time.Minute, "Cluster ext Ready on an instance", func() (bool, string) {
		f := strings.Fields(state())
		if len(f) == 3 && f[0] == "Ready" && f[1] == f[2] {
			owner = f[1]
		}
		return owner != "", state()
	})
	other := map[string]string{"host-a": "host-b", "host-b": "host-a"}[owner]
	uid := kubectl("get", "clusters", "ext", "-o", "jsonpath={.metadata.uid}")
	tenant, _ := externaldb.TenantOf(uid)
	eventually(t, time.Minute, "its identity kept on the front", func() (bool, string) {
		out := kubectl("get", "secrets", "-o", "name")
		return strings.Contains(out, "secret/ext-identity"), out
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tenantClient := func() kubernetes.Interface {
		t.Helper()
		raw, err := base64.StdEncoding.DecodeString(kubectl("get", "secret", "ext-kubeconfig", "-o", "jsonpath={.data.kubeconfig}"))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Timeout = 10 * time.Second
		return kubernetes.NewForConfigOrDie(cfg)
	}
	if _, err := tenantClient().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"v": "before the loss"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := processrunner.FindByMarker(filepath.Join(roots[owner], "clusters", "ext")+"/", []string{"/usr/lib/postgresql/15/bin/postgres"}); len(ids) > 0 {
		t.Errorf("a cluster on the external datastore runs a Postgres of its own: %v", ids)
	}
	pass, err := os.ReadFile(clusterstack.Layout{Root: filepath.Join(roots[owner], "clusters", "ext")}.ExternalPGPass())
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(strings.TrimSpace(string(pass)), ":")
	heldPassword := f[len(f)-1]

	// The host is gone: its serve and every process it started, at once.
	programs := append(livetest.StackPrograms(bin), exe)
	serving[owner].Cmd.Process.Kill()
	serving[owner].Cmd.Wait()
	victims, _ := processrunner.FindByMarker(roots[owner]+"/", programs)
	for _, id := range victims {
		syscall.Kill(id.Pid, syscall.SIGKILL)
	}
	t0 := time.Now()
	t.Logf("%s lost: its serve and %d processes killed", owner, len(victims))
	renewed, err := time.Parse(time.RFC3339Nano, kubectl("get", "leases", "-n", "socialweb-system", owner, "-o", "jsonpath={.spec.renewTime}"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, failoverBound, "ext Ready on "+other, func() (bool, string) {
		s := state()
		return s == "Ready "+other+" "+other, s
	})
	expired := renewed.Add(30 * time.Second)
	t.Logf("ext Ready on %s %.1fs after %s was lost, %.1fs after its lease expired", other, time.Since(t0).Seconds(), owner, time.Since(expired).Seconds())
	var cm *corev1.ConfigMap
	eventually(t, time.Minute, "the ConfigMap read through the kubeconfig delivered again", func() (bool, string) {
		cm, err = tenantClient().CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
		return err == nil, errString(err)
	})
	if cm.Data["v"] != "before the loss" {
		t.Errorf("the ConfigMap after the failover: %v", cm.Data)
	}
	if c, err := srv.Connect(ctx, tenant.Role, heldPassword, tenant.Database); err == nil {
		c.Close(ctx)
		t.Error("the password the lost instance's kine held still opens the datastore")
	} else if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "28P01" {
		t.Errorf("the lost instance's password: %v; want an authentication failure", err)
	}

	// The lost instance comes back: it runs nothing of ext, and keeps nothing of it.
	serving[owner] = serveAs(owner)
	dataDir := filepath.Join(roots[owner], "clusters", "ext")
	eventually(t, 2*time.Minute, owner+" let go of ext", func() (bool, string) {
		ids, _ := processrunner.FindByMarker(dataDir+"/", programs)
		_, statErr := os.Stat(dataDir)
		l := leaseOf(t, roots[owner], "ext")
		return len(ids) == 0 && os.IsNotExist(statErr) && l == nil, fmt.Sprintf("processes %d, DataDir %v, lease %v", len(ids), statErr, l)
	})
	if s := state(); s != "Ready "+other+" "+other {
		t.Errorf("after %s came back: %s", owner, s)
	}

	kubectl("delete", "clusters", "ext", "--wait=true", "--timeout=180s")
	if has, err := srv.Exists(ctx, tenant); err != nil || has {
		t.Errorf("after the delete, the external database is there: %v, %v", has, err)
	}
	if out := kubectl("get", "secrets", "-o", "name"); strings.Contains(out, "ext-") {
		t.Errorf("Secrets of ext left on the front: %s", out)
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// A datastore the instance cannot use keeps the clusters on it Pending, with a condition
// that says what is wrong, and makes nothing of them: no DataDir, no process, no database.
// First a wrong administrator password, then a server that is not there; then an
// instance of capacity zero, for a local cluster.
func TestAnUnusableExternalDatastoreIsACondition(t *testing.T) {
	exe, bin := liveBinary(t, "kube-control-plane", "kube-apiserver", "kine", "socialweb-cloud-controller-manager", "kubectl")
	good, srv := livetest.ExternalPostgres(t, clusterstack.DefaultPostgresBin)
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	wrongPassword := filepath.Join(t.TempDir(), "wrong-password")
	os.WriteFile(wrongPassword, []byte(strings.Replace(string(raw), ":"+srv.AdminPassword+"@", ":not-the-password@", 1)), 0o600)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	nowhere := filepath.Join(t.TempDir(), "nowhere")
	os.WriteFile(nowhere, []byte(strings.Replace(string(raw), "@"+srv.Address()+"/", "@"+closed+"/", 1)), 0o600)

	root := livetest.DataRoot(t)
	manifest := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(manifest, []byte("apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: bad, namespace: default}\nspec: {account: acme, datastore: external}\n"), 0o600)
	local := filepath.Join(t.TempDir(), "local.yaml")
	os.WriteFile(local, []byte("apiVersion: socialweb.computer/v1alpha1\nkind: Cluster\nmetadata: {name: bad, namespace: default}\nspec: {account: acme}\n"), 0o600)
	for _, c := range []struct {
		flags          []string
		manifest, want string
	}{
		{[]string{"--external-datastore", wrongPassword}, manifest, "password authentication failed"},
		{[]string{"--external-datastore", nowhere}, manifest, closed},
		{[]string{"--capacity", "clusters=0"}, local, "no instance has room: each of the 1 live instances is at its capacity"},
	} {
		p, kubectl, _ := startServeWith(t, exe, bin, root, "31900-31909", c.flags...)
		kubectl("apply", "-f", c.manifest)
		var cond string
		eventually(t, 2*time.Minute, "Cluster bad Pending, saying why", func() (bool, string) {
			cond = kubectl("get", "clusters", "bad", "-o", `jsonpath={.status.phase} {.status.conditions[?(@.type=="Ready")].reason}: {.status.conditions[?(@.type=="Ready")].message}`)
			return strings.HasPrefix(cond, "Pending NoRoom: ") && strings.Contains(cond, c.want), cond
		})
		t.Logf("with %v: %s", c.flags, cond)
		if _, err := os.Stat(filepath.Join(root, "clusters", "bad")); !os.IsNotExist(err) {
			t.Errorf("a DataDir of the cluster that could not be placed: %v", err)
		}
		if ids, _ := processrunner.FindByMarker(filepath.Join(root, "clusters", "bad")+"/", livetest.StackPrograms(bin)); len(ids) > 0 {
			t.Errorf("processes of the cluster that could not be placed: %v", ids)
		}
		kubectl("delete", "clusters", "bad", "--wait=true", "--timeout=60s")
		p.Cmd.Process.Signal(syscall.SIGTERM)
		p.WaitLine(t, "stopped; nothing is running")
		p.Cmd.Wait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var dbs int
	if err := func() error {
		c, err := srv.Connect(ctx, srv.Admin, srv.AdminPassword, srv.AdminDatabase)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		return c.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname LIKE 'kine_%'").Scan(&dbs)
	}(); err != nil || dbs != 0 {
		t.Errorf("databases made on the server: %d, %v", dbs, err)
	}
}
