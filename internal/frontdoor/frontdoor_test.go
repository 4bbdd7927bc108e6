package frontdoor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"socialweb.computer/kcp/internal/pki"
)

// tenant is one cluster's apiserver stand-in for these tests: an HTTPS server with its own
// CA that, as kube-apiserver does, verifies client certificates against that CA and
// answers with the identity it verified.
type tenant struct {
	name   string
	caPool *x509.CertPool
	cert   tls.Certificate                // a client certificate its CA signed
	pem    struct{ ca, cert, key []byte } // the same, as a kubeconfig carries them
	srv    *httptest.Server
	stream chan string // lines for /watch, each flushed as it comes
}

func newTenant(t *testing.T, name string, names []string) *tenant {
	t.Helper()
	ca, err := pki.NewCA(name + "-ca")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	serving := issue(t, ca, pki.Leaf{CommonName: name, DNSNames: names, Server: true})
	tn := &tenant{name: name, caPool: pool, stream: make(chan string)}
	tn.pem.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
	if tn.pem.cert, tn.pem.key, err = ca.Issue(pki.Leaf{CommonName: name + "-user"}); err != nil {
		t.Fatal(err)
	}
	if tn.cert, err = tls.X509KeyPair(tn.pem.cert, tn.pem.key); err != nil {
		t.Fatal(err)
	}
	tn.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := "anonymous"
		if len(r.TLS.VerifiedChains) > 0 {
			user = r.TLS.VerifiedChains[0][0].Subject.CommonName
		}
		if r.URL.Path == "/watch" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for {
				select {
				case line := <-tn.stream:
					fmt.Fprintln(w, line)
					w.(http.Flusher).Flush()
				case <-r.Context().Done():
					return
				}
			}
		}
		fmt.Fprintf(w, "cluster %s, user %s", name, user)
	}))
	tn.srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	tn.srv.StartTLS()
	t.Cleanup(tn.srv.Close)
	return tn
}

func issue(t *testing.T, ca *pki.CA, leaf pki.Leaf) tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(leaf)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// client is what a tenant's kubeconfig gives: the cluster's CA, a client certificate, and
// the front door's address under the cluster's name. As client-go does, it offers its
// certificate whatever CAs the server says it accepts.
func (tn *tenant) client(doorAddr, serverName string, cert tls.Certificate) *http.Client {
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: tn.caPool, ServerName: serverName,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", doorAddr)
		},
		DisableKeepAlives: true,
	}}
}

func get(c *http.Client, path string) (string, error) {
	resp, err := c.Get("https://front-door" + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// backends is a Backends over a map, counting calls, optionally held on a gate.
type backends struct {
	mu    sync.Mutex
	addrs map[string]string
	err   error
	gate  chan struct{} // nil: answer at once
	calls atomic.Int64
}

func (b *backends) Address(ctx context.Context, cluster string) (string, error) {
	b.calls.Add(1)
	if b.gate != nil {
		select {
		case <-b.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return "", b.err
	}
	addr, ok := b.addrs[cluster]
	if !ok {
		return "", fmt.Errorf("cluster %q: %w", cluster, ErrUnknownCluster)
	}
	return addr, nil
}

// door starts a Server on loopback and stops it when the test ends.
func door(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func twoTenants(t *testing.T) (a, b *tenant, be *backends, s *Server, addr string) {
	a = newTenant(t, "a", []string{"a.kcp.test"})
	b = newTenant(t, "b", []string{"b.kcp.test"})
	be = &backends{addrs: map[string]string{"a": a.srv.Listener.Addr().String(), "b": b.srv.Listener.Addr().String()}}
	s = &Server{Names: Names{BaseDomain: "kcp.test"}, Backends: be, Metrics: NewMetrics(prometheus.NewRegistry())}
	return a, b, be, s, door(t, s)
}

func TestEachNameReachesItsOwnCluster(t *testing.T) {
	a, b, _, s, addr := twoTenants(t)
	for _, tn := range []*tenant{a, b} {
		got, err := get(tn.client(addr, tn.name+".kcp.test", tn.cert), "/")
		if want := fmt.Sprintf("cluster %s, user %s-user", tn.name, tn.name); err != nil || got != want {
			t.Errorf("through the front door as %s: %q, %v; want %q", tn.name, got, err, want)
		}
	}
	// The client verified the backend's own certificate (the front door has none), and
	// the backend verified the client's: TLS went end to end.
	if got := testutil.ToFloat64(s.Metrics.connections.WithLabelValues("a")); got != 1 {
		t.Errorf("connections to a = %v, want 1", got)
	}
	if in := testutil.ToFloat64(s.Metrics.bytes.WithLabelValues("b", "in")); in == 0 {
		t.Errorf("no bytes counted in to b")
	}
}

func TestAnExtraNameRoutesOnceSetAndNoLongerOnceRemoved(t *testing.T) {
	a := newTenant(t, "a", []string{"a.kcp.test", "api.shop.test"})
	be := &backends{addrs: map[string]string{"a": a.srv.Listener.Addr().String()}}
	s := &Server{Names: Names{BaseDomain: "kcp.test"}, Backends: be}
	addr := door(t, s)
	if _, err := get(a.client(addr, "api.shop.test", a.cert), "/"); err == nil || !strings.Contains(err.Error(), "unrecognized name") {
		t.Fatalf("before the name is set: %v, want unrecognized name", err)
	}
	s.SetNames(Names{BaseDomain: "kcp.test", Extra: map[string]string{"api.shop.test": "a"}})
	if got, err := get(a.client(addr, "api.shop.test", a.cert), "/"); err != nil || got != "cluster a, user a-user" {
		t.Errorf("by its extra name: %q, %v", got, err)
	}
	s.SetNames(Names{BaseDomain: "kcp.test"})
	if _, err := get(a.client(addr, "api.shop.test", a.cert), "/"); err == nil {
		t.Errorf("a removed name still routes")
	}
	if got, err := get(a.client(addr, "a.kcp.test", a.cert), "/"); err != nil || got != "cluster a, user a-user" {
		t.Errorf("by its own name: %q, %v", got, err)
	}
}

func TestAClientCertificateOfOneClusterIsRefusedByAnother(t *testing.T) {
	a, b, _, _, addr := twoTenants(t)
	// A's user, trusting B's CA (so the server check passes), offers A's certificate to B.
	got, err := get(b.client(addr, "b.kcp.test", a.cert), "/")
	if err == nil {
		t.Fatalf("B answered A's certificate: %q", got)
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("error %v does not say the certificate was refused", err)
	}
	// And A's CA does not verify B's serving certificate: a client cannot be steered to
	// the wrong cluster by the name it asks for.
	if _, err := get(a.client(addr, "b.kcp.test", a.cert), "/"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("A's client trusted B's apiserver: %v", err)
	}
}

func TestNamesNoClusterHasAreRefusedWithoutTouchingABackend(t *testing.T) {
	a, _, be, s, addr := twoTenants(t)
	for _, tc := range []struct {
		what, serverName, reason string
	}{
		{"no server name", "", "no_server_name"},
		{"another domain", "a.other.test", "unknown_name"},
		{"two labels", "x.a.kcp.test", "unknown_name"},
	} {
		cfg := &tls.Config{ServerName: tc.serverName, RootCAs: a.caPool, InsecureSkipVerify: tc.serverName == ""}
		c, err := tls.Dial("tcp", addr, cfg) // an IP address is never sent as a server name
		if err == nil {
			c.Close()
			t.Errorf("%s: the handshake succeeded", tc.what)
			continue
		}
		if !strings.Contains(err.Error(), "unrecognized name") {
			t.Errorf("%s: %v, want a TLS alert saying unrecognized name", tc.what, err)
		}
		if got := testutil.ToFloat64(s.Metrics.refusals.WithLabelValues(tc.reason)); got < 1 {
			t.Errorf("%s: refusals{reason=%s} = %v", tc.what, tc.reason, got)
		}
	}
	if n := be.calls.Load(); n != 0 {
		t.Errorf("Backends asked %d times for names no cluster has", n)
	}
	// A name of the base domain that Backends does not know: asked once, refused alike.
	if _, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "c.kcp.test", RootCAs: a.caPool}); err == nil || !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("unknown cluster c: %v, want unrecognized name", err)
	}
	if got := testutil.ToFloat64(s.Metrics.refusals.WithLabelValues("unknown_cluster")); got != 1 {
		t.Errorf("refusals{unknown_cluster} = %v, want 1", got)
	}
}

func TestSomethingNotTLSIsClosed(t *testing.T) {
	_, _, be, s, addr := twoTenants(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a.kcp.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Errorf("plain HTTP got %q, %v; want the connection closed with nothing said", b, err)
	}
	if be.calls.Load() != 0 || testutil.ToFloat64(s.Metrics.refusals.WithLabelValues("not_tls")) != 1 {
		t.Errorf("backend calls %d, refusals{not_tls} %v; want 0 and 1", be.calls.Load(), testutil.ToFloat64(s.Metrics.refusals.WithLabelValues("not_tls")))
	}
}

func TestAClusterThatCannotBeReachedIsAnInternalError(t *testing.T) {
	a, _, be, s, addr := twoTenants(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	be.mu.Lock()
	be.addrs["a"] = closed // an apiserver that is not listening
	be.mu.Unlock()
	if _, err := get(a.client(addr, "a.kcp.test", a.cert), "/"); err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Errorf("a down apiserver: %v, want a TLS internal error alert", err)
	}
	be.mu.Lock()
	be.err = errors.New("wake failed at kine")
	be.mu.Unlock()
	if _, err := get(a.client(addr, "a.kcp.test", a.cert), "/"); err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Errorf("a failed wake: %v, want a TLS internal error alert", err)
	}
	if got := testutil.ToFloat64(s.Metrics.refusals.WithLabelValues("unavailable")); got != 2 {
		t.Errorf("refusals{unavailable} = %v, want 2", got)
	}
}

func TestConnectionsAreHeldWhileTheClusterWakes(t *testing.T) {
	a, _, be, s, addr := twoTenants(t)
	be.gate = make(chan struct{})
	const n = 20
	errs := make(chan error, n)
	for range n {
		go func() {
			got, err := get(a.client(addr, "a.kcp.test", a.cert), "/")
			if err == nil && !strings.HasPrefix(got, "cluster a") {
				err = fmt.Errorf("answer %q", got)
			}
			errs <- err
		}()
	}
	waitFor(t, "20 connections held on the wake", func() bool { return be.calls.Load() == n })
	select {
	case err := <-errs:
		t.Fatalf("a request ended while the cluster was still waking: %v", err)
	default:
	}
	close(be.gate) // awake
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := testutil.ToFloat64(s.Metrics.connections.WithLabelValues("a")); got != n {
		t.Errorf("connections to a = %v, want %d", got, n)
	}
	waitFor(t, "every connection closed", func() bool { _, open := s.Activity("a"); return open == 0 })
}

// A wake longer than a client waits for its handshake: each held connection is closed
// without an alert when the hold ends, and client-go, which retries a GET that meets EOF,
// gets its answer once the cluster is up, with no error.
func TestAWakeLongerThanTheHoldIsRiddenByClientGoRetries(t *testing.T) {
	a := newTenant(t, "a", []string{"a.kcp.test"})
	be := &backends{addrs: map[string]string{"a": a.srv.Listener.Addr().String()}, gate: make(chan struct{})}
	s := &Server{Names: Names{BaseDomain: "kcp.test"}, Backends: be, Metrics: NewMetrics(prometheus.NewRegistry()), HoldTimeout: 200 * time.Millisecond}
	addr := door(t, s)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://a.kcp.test",
		TLSClientConfig: rest.TLSClientConfig{CAData: a.pem.ca, CertData: a.pem.cert, KeyData: a.pem.key},
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var got []byte
	go func() {
		defer close(done)
		got, err = cs.Discovery().RESTClient().Get().AbsPath("/").DoRaw(context.Background())
	}()
	// The cluster comes up only after two holds have ended.
	waitFor(t, "a third attempt held", func() bool { return be.calls.Load() >= 3 })
	close(be.gate)
	<-done
	if err != nil || !strings.HasPrefix(string(got), "cluster a, user a-user") {
		t.Fatalf("GET through a long wake: %q, %v", got, err)
	}
	if n := testutil.ToFloat64(s.Metrics.refusals.WithLabelValues("waking")); n < 2 {
		t.Errorf("refusals{waking} = %v, want at least 2", n)
	}
}

func TestAWatchStaysOpenAndIsCountedAsItFlows(t *testing.T) {
	a, _, _, s, addr := twoTenants(t)
	before := time.Now()
	resp, err := a.client(addr, "a.kcp.test", a.cert).Get("https://front-door/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for i := range 5 {
		want := fmt.Sprintf("event %d", i)
		a.stream <- want
		if !lines.Scan() || lines.Text() != want {
			t.Fatalf("watch line %d: %q, %v; want %q", i, lines.Text(), lines.Err(), want)
		}
	}
	last, open := s.Activity("a")
	if open != 1 || last.Before(before) {
		t.Errorf("Activity(a) = %v, %d open; want one open since %v", last, open, before)
	}
	if out := testutil.ToFloat64(s.Metrics.bytes.WithLabelValues("a", "out")); out == 0 {
		t.Errorf("bytes out to a's watcher not counted while the watch is open")
	}
	if got := testutil.ToFloat64(s.Metrics.open.WithLabelValues("a")); got != 1 {
		t.Errorf("open_connections{a} = %v, want 1", got)
	}
}

func TestStoppingClosesEveryConnection(t *testing.T) {
	a := newTenant(t, "a", []string{"a.kcp.test"})
	s := &Server{Names: Names{BaseDomain: "kcp.test"}, Backends: &backends{addrs: map[string]string{"a": a.srv.Listener.Addr().String()}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	resp, err := a.client(ln.Addr().String(), "a.kcp.test", a.cert).Get("https://front-door/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after a stop: %v", err)
	}
	resp.Body.(io.Reader).Read(make([]byte, 1)) // returns once the connection is gone
	if _, open := s.Activity("a"); open != 0 {
		t.Errorf("%d connections open after Serve returned", open)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Errorf("the listener still accepts after the stop")
	}
}

// A ClientHello read a byte at a time is still read whole, and every byte read is given
// back for the backend.
func TestReadHelloKeepsEveryByte(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	go tls.Client(client, &tls.Config{ServerName: "demo.kcp.example"}).Handshake()
	var all bytes.Buffer
	name, read, err := readHello(io.TeeReader(iotest.OneByteReader(server), &all))
	client.Close()
	if err != nil || name != "demo.kcp.example" {
		t.Fatalf("readHello = %q, %v", name, err)
	}
	if !bytes.Equal(read, all.Bytes()) || len(read) < 100 || read[0] != 22 {
		t.Errorf("readHello gave back %d bytes of the %d it read (first %x)", len(read), all.Len(), read[:1])
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
