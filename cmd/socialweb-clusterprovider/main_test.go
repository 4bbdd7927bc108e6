package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/klog/v2"

	"socialweb.computer/kcp/internal/clusterstack"
)

// fakeInstall makes a bin dir and a Postgres bin dir of executables that must never run,
// leaving out the missing ones, and points this command's Postgres bin dir at the latter
// for the test: what is missing is the same on every machine, whatever it has installed.
func fakeInstall(t *testing.T, missing ...string) (bin, pg string) {
	t.Helper()
	bin, pg = t.TempDir(), t.TempDir()
	files := map[string]string{"initdb": pg, "postgres": pg}
	for _, b := range []string{"kine", "kube-control-plane", "kube-apiserver", "kube-controller-manager", "kube-scheduler", clusterstack.CloudControllerManagerBinary, "kwok"} {
		files[b] = bin
	}
	for name, dir := range files {
		if !slices.Contains(missing, name) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 99\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	old := postgresBinDir
	postgresBinDir = pg
	t.Cleanup(func() { postgresBinDir = old })
	return bin, pg
}

func TestBadInvocationsNameWhatIsWrong(t *testing.T) {
	fakeInstall(t) // Postgres "installed": the missing binary below is kine, on every machine
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"up"}, "NAME"},
		{[]string{"up", "demo", "--port-range", "9-8"}, "--port-range"},
		{[]string{"up", "demo", "--max-nodes", "-1"}, "--max-nodes"},
		{[]string{"up", "demo", "--apiserver-bind-address", "localhost"}, `--apiserver-bind-address "localhost": not an IP address`},
		{[]string{"up", "demo", "--apiserver-bind-address", "192.0.2.77"}, "--apiserver-bind-address 192.0.2.77: cannot be bound on this host"}, // TEST-NET-1: no host has it
		{[]string{"serve", "--data-root", "DATA", "--apiserver-advertise-address", "0.0.0.0"}, `--apiserver-advertise-address "0.0.0.0": want the one IP address`},
		// Linux's default ephemeral ports are 32768-60999; nothing here reserves 45000-45099.
		{[]string{"up", "demo", "--port-range", "45000-45099"}, "--port-range 45000-45099: ports 45000-45099 are in the kernel's ephemeral range"},
		{[]string{"up", "demo", "--nodes", "-1"}, "--nodes"},
		{[]string{"up", "demo", "--cert-validity", "1s"}, "--cert-validity: certificate validity 1s: want 10s or more"},
		{[]string{"up", "demo", "--cert-validity", "40s", "--cert-renew-share", "0.7"}, "--cert-validity and --cert-renew-share: validity 40s with renewal share 0.7: a leaf is due 12s after it is minted"},
		{[]string{"serve", "--data-root", "DATA", "--max-running-clusters", "-1"}, "--max-running-clusters: -1; want 0 (no cap) or more"},
		{[]string{"serve", "--data-root", "DATA", "--cert-renew-share", "1.5"}, "--cert-renew-share: renewal share 1.5: want more than 0 and less than 1"},
		{[]string{"nodes"}, "usage: nodes add"},
		{[]string{"nodes", "ls"}, "usage: nodes add"},
		{[]string{"nodes", "ls", "Bad_Name", "--data-root", "DATA"}, "cluster name"},
		{[]string{"nodes", "add", "demo", "--data-root", "DATA"}, "cluster demo is not running"},
		{[]string{"up", "demo", "--pods-per-node", "-5"}, "--pods-per-node"},
		{[]string{"up", "Bad_Name", "--data-root", "DATA", "--bin-dir", "/nonexistent"}, "cluster name"},
		{[]string{"up", "demo", "--data-root", "DATA", "--bin-dir", "/nonexistent"}, "/nonexistent/kine is missing"},
		{[]string{"serve", "--data-root", "DATA", "--front-door", "127.0.0.1:0"}, "--front-door needs --base-domain"},
		{[]string{"serve", "--data-root", "DATA", "--base-domain", "kcp.example"}, "--base-domain, --front-door-port and --sleep-after need --front-door"},
		{[]string{"serve", "--data-root", "DATA", "--sleep-after", "15m"}, "--sleep-after need --front-door"},
		{[]string{"serve", "--data-root", "DATA", "--front-door", "127.0.0.1:0", "--base-domain", "kcp.example", "--sleep-after", "-1s"}, "--sleep-after: -1s"},
		{[]string{"serve", "--data-root", "DATA", "--front-door", "127.0.0.1:0", "--base-domain", "Kcp_Example"}, "--base-domain: base domain \"Kcp_Example\""},
		{[]string{"serve", "--data-root", "DATA", "--front-door", "127.0.0.1:0", "--base-domain", "kcp.example", "--front-door-port", "70000"}, "--front-door-port"},
		{[]string{"serve", "--data-root", "DATA", "--front-door", "256.0.0.1:6443", "--base-domain", "kcp.example"}, "--front-door: listen tcp"},
	} {
		var out, errb bytes.Buffer
		args := make([]string, len(tc.args))
		for i, a := range tc.args {
			args[i] = strings.ReplaceAll(a, "DATA", t.TempDir())
		}
		err := run(args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// A missing binary is named, with what to run, before anything starts; the k3s flavour
// (--k3s-binary) does not need kube-control-plane, kube-apiserver, kube-controller-manager or
// kube-scheduler.
func TestAMissingBinaryIsNamed(t *testing.T) {
	k3s := filepath.Join(t.TempDir(), "k3s")
	os.WriteFile(k3s, []byte("#!/bin/sh\nexit 99\n"), 0o755)
	for _, tc := range []struct {
		missing []string
		k3s     bool
		want    string // the missing binary named, in BIN or PG
	}{
		{[]string{"postgres"}, false, "PG/postgres"},
		{[]string{"kube-control-plane"}, false, "BIN/kube-control-plane"},
		{[]string{"kube-control-plane", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}, true, "BIN/kwok"},
	} {
		bin, pg := fakeInstall(t, tc.missing...)
		data := t.TempDir()
		args := []string{"up", "demo", "--data-root", data, "--bin-dir", bin}
		if tc.k3s {
			args = append(args, "--k3s-binary", k3s)
		}
		want := strings.NewReplacer("BIN", bin, "PG", pg).Replace(tc.want) + " is missing or not executable; run deploy/install-components.sh"
		var out, errb bytes.Buffer
		if err := run(args, &out, &errb); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %v (k3s %v): run = %v, want an error containing %q", tc.missing, tc.k3s, err, want)
		}
		if _, err := os.Stat(filepath.Join(data, "clusters", "demo")); !os.IsNotExist(err) {
			t.Errorf("missing %v: the refused bring-up made the DataDir", tc.missing)
		}
	}
}

// A bad --k3s-binary is refused, naming the flag, the path and what to do, before
// anything starts (up and serve alike): the data root is left untouched.
func TestABadK3sBinaryIsRefusedFirst(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "k3s.txt")
	os.WriteFile(plain, []byte("not a program"), 0o644)
	os.Chmod(plain, 0o644) // whatever the umask
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "nope"), "no such file or directory; give the path of an installed k3s binary, or leave --k3s-binary out"},
		{dir, "is a directory; give the path of the k3s binary itself"},
		{plain, "not executable (mode -rw-r--r--); chmod +x it"},
	} {
		for _, verb := range []string{"up demo", "serve"} {
			data := t.TempDir()
			args := append(strings.Fields(verb), "--data-root", data, "--k3s-binary", tc.path)
			var out, errb bytes.Buffer
			err := run(args, &out, &errb)
			if want := "--k3s-binary " + tc.path + ": " + tc.want; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s --k3s-binary %s: %v, want an error containing %q", verb, tc.path, err, want)
			}
			if ents, _ := os.ReadDir(data); len(ents) != 0 {
				t.Errorf("%s --k3s-binary %s: the data root has %v; want nothing touched", verb, tc.path, ents)
			}
		}
	}
}

// k3sBinary accepts an executable file and makes its path absolute.
func TestK3sBinary(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "k3s"), []byte("#!/bin/sh\n"), 0o755)
	got, err := k3sBinary(filepath.Join(dir, "k3s"))
	if err != nil || got != filepath.Join(dir, "k3s") {
		t.Fatalf("k3sBinary = %q, %v", got, err)
	}
	t.Chdir(dir)
	if got, err := k3sBinary("k3s"); err != nil || got != filepath.Join(dir, "k3s") {
		t.Fatalf("k3sBinary(relative) = %q, %v; want %s", got, err, filepath.Join(dir, "k3s"))
	}
}

// /readyz follows the loop: 503 until it serves and once it stops; /healthz is 200 throughout.
func TestHealthEndpoints(t *testing.T) {
	var serving atomic.Bool
	mux := http.NewServeMux()
	addHealth(mux, serving.Load)
	code := func(path string) int {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code
	}
	for _, tc := range []struct {
		serving        bool
		healthz, ready int
	}{{false, 200, 503}, {true, 200, 200}, {false, 200, 503}} {
		serving.Store(tc.serving)
		if h, r := code("/healthz"), code("/readyz"); h != tc.healthz || r != tc.ready {
			t.Errorf("serving %v: /healthz %d /readyz %d; want %d %d", tc.serving, h, r, tc.healthz, tc.ready)
		}
	}
}

// serve's log is one format: client-go's klog lines come out of the same slog handler.
func TestOneLogFormat(t *testing.T) {
	var b bytes.Buffer
	log, err := newLogger("json", &b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(klog.ClearLogger)
	log.Info("from slog", "cluster", "default/demo")
	klog.InfoS("from klog", "resource", "clusters")
	klog.Flush()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", b.String())
	}
	for i, want := range []string{`"msg":"from slog"`, `"msg":"from klog"`} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil || !strings.Contains(lines[i], want) {
			t.Errorf("line %d: %q (%v); want JSON with %s", i, lines[i], err, want)
		}
	}
	if _, err := newLogger("xml", &b); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("--log-format xml: %v; want an error naming the flag", err)
	}
}

// One CLI framework for both binaries: cobra's completion and help work here too.
func TestCompletionAndHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run([]string{"completion", "bash"}, &out, &errb); err != nil || !strings.Contains(out.String(), "__start_socialweb-clusterprovider") {
		t.Errorf("completion bash: %v; script %d bytes", err, out.Len())
	}
	out.Reset()
	if err := run([]string{"serve", "--help"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--front-kubeconfig", "--metrics-address", "--log-format", "--data-root", "--port-range", "-v, --verbose"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("serve --help lacks %s", flag)
		}
	}
}

// A front door that cannot be had stops serve before anything is made: no data root, no
// lock, nothing started. The address in use is the case an operator meets most.
func TestABadFrontDoorChangesNothing(t *testing.T) {
	bin, _ := fakeInstall(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, flags := range [][]string{
		{"--front-door", taken.Addr().String(), "--base-domain", "kcp.example"},
		{"--front-door", "127.0.0.1:0", "--base-domain", "localhost"},
	} {
		root := filepath.Join(t.TempDir(), "root")
		var out, errb bytes.Buffer
		err := run(append([]string{"serve", "--data-root", root, "--bin-dir", bin, "--metrics-address", "127.0.0.1:0"}, flags...), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), flags[0]) && !strings.Contains(err.Error(), flags[2]) {
			t.Errorf("serve %q = %v; want an error naming the flag", flags, err)
		}
		if _, err := os.Stat(root); !os.IsNotExist(err) {
			t.Errorf("serve %q made its data root (%v)", flags, err)
		}
	}
}
