// Package frontdoor is one TLS listener in front of every tenant apiserver. It reads the
// server name of each connection's ClientHello and pipes the connection, still encrypted,
// to the apiserver of the cluster that name belongs to. It never terminates TLS: tenant
// credentials and client certificates go end to end, and the front door holds no tenant
// secret. A name that belongs to no cluster, or no name at all, is refused with a TLS
// alert before any backend is touched.
//
// Where a cluster's apiserver listens is asked of Backends per connection, and may take
// as long as a wake takes: the connection is held, not refused, meanwhile. The front door
// also keeps, per cluster, how many connections are open and when a client last sent a
// byte, which is what deciding that a cluster is idle needs.
package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Backends is what the front door needs of the provider.
type Backends interface {
	// Address is the host:port cluster's apiserver listens on now. It may block while
	// the cluster wakes, until ctx ends; an error wrapping ErrUnknownCluster says no such
	// cluster is served here, any other that it cannot be reached now.
	Address(ctx context.Context, cluster string) (string, error)
}

// ErrUnknownCluster is what Backends.Address wraps for a cluster it does not serve.
var ErrUnknownCluster = errors.New("no such cluster")

// Timeouts a Server applies unless set.
const (
	DefaultHelloTimeout = 10 * time.Second // a client that connects must send its hello by then
	DefaultDialTimeout  = 5 * time.Second  // to connect to an apiserver whose address is known
	// DefaultHoldTimeout bounds how long a connection is held while its cluster wakes.
	// client-go gives up on a TLS handshake after 10 s with an error it does not retry;
	// closed before that, without an alert, a GET meets EOF, which client-go retries a
	// second later (up to 10 times), and the wake goes on meanwhile. So a read rides a
	// wake of up to about a minute and a half; a write that is a sleeping cluster's first
	// request rides one of up to this bound.
	DefaultHoldTimeout = 8 * time.Second
)

// Server routes connections. Set the fields, then call Serve once; SetNames changes the
// names while it serves.
type Server struct {
	Names    Names // the names it starts with
	Backends Backends
	Metrics  *Metrics     // nil: none
	Log      *slog.Logger // nil: discard

	HelloTimeout, DialTimeout, HoldTimeout time.Duration // zero: the defaults

	names    atomic.Pointer[Names] // set by SetNames; nil: Names
	mu       sync.Mutex
	activity map[string]*activity
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// SetNames replaces the names connections are routed by (the clusters' extra names came
// or went); a connection already piped stays with its cluster.
func (s *Server) SetNames(n Names) { s.names.Store(&n) }

func (s *Server) currentNames() *Names {
	if n := s.names.Load(); n != nil {
		return n
	}
	return &s.Names
}

// activity is one cluster's traffic as the sleep decision needs it.
type activity struct {
	open atomic.Int64
	last atomic.Int64 // unix nanoseconds of the last byte a client sent, or of the last close
}

// Activity is when a client last sent cluster a byte through the front door (or last
// closed a connection to it), and how many connections to it are open now. The zero time
// means none since this Server started.
func (s *Server) Activity(cluster string) (last time.Time, open int) {
	s.mu.Lock()
	a := s.activity[cluster]
	s.mu.Unlock()
	if a == nil {
		return time.Time{}, 0
	}
	return time.Unix(0, a.last.Load()), int(a.open.Load())
}

func (s *Server) activityOf(cluster string) *activity {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.activity == nil {
		s.activity = map[string]*activity{}
	}
	a := s.activity[cluster]
	if a == nil {
		a = &activity{}
		s.activity[cluster] = a
	}
	return a
}

// Forget drops what the Server keeps of cluster (its activity and its metric series),
// for a cluster that is gone.
func (s *Server) Forget(cluster string) {
	s.mu.Lock()
	delete(s.activity, cluster)
	s.mu.Unlock()
	s.Metrics.forget(cluster)
}

// Serve accepts on ln until ctx ends, then closes ln and every connection it is piping,
// and returns once each has been let go. It returns nil when ctx ended it.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	if s.Backends == nil {
		return errors.New("frontdoor: Server.Backends is nil")
	}
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	})
	defer stop()
	defer s.wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue // a transient accept failure (EMFILE surfaces as one): keep serving
			}
			return fmt.Errorf("frontdoor: accept: %w", err)
		}
		if !s.track(c, ctx) {
			c.Close()
			return nil
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			s.handle(ctx, c)
		}()
	}
}

// track records c so that a stop closes it; false when the stop came first.
func (s *Server) track(c net.Conn, ctx context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// handle routes one connection: hello, name, backend, pipe. Every refusal is a TLS alert
// and a count by reason; none is an error of the front door's own, so none logs above
// Info.
func (s *Server) handle(ctx context.Context, c net.Conn) {
	c.SetReadDeadline(time.Now().Add(orDefault(s.HelloTimeout, DefaultHelloTimeout)))
	serverName, hello, err := readHello(c)
	if err != nil {
		s.refuse(c, "not_tls", "", 0, "peer", c.RemoteAddr().String(), "err", err)
		return
	}
	if serverName == "" {
		s.refuse(c, "no_server_name", "", alertUnrecognizedName, "peer", c.RemoteAddr().String())
		return
	}
	cluster, ok := s.currentNames().Cluster(serverName)
	if !ok {
		s.refuse(c, "unknown_name", "", alertUnrecognizedName, "peer", c.RemoteAddr().String(), "serverName", serverName)
		return
	}
	c.SetReadDeadline(time.Time{})

	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, orDefault(s.HoldTimeout, DefaultHoldTimeout))
	addr, err := s.Backends.Address(wctx, cluster)
	cancel()
	if errors.Is(err, ErrUnknownCluster) {
		s.refuse(c, "unknown_cluster", cluster, alertUnrecognizedName, "peer", c.RemoteAddr().String(), "serverName", serverName)
		return
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		// Held as long as a client waits for a handshake: closed without an alert, so
		// that it retries (DefaultHoldTimeout); the wake goes on.
		s.refuse(c, "waking", cluster, 0, "peer", c.RemoteAddr().String(), "held", time.Since(start).Round(time.Millisecond))
		return
	}
	if err != nil {
		s.refuse(c, "unavailable", cluster, alertInternalError, "peer", c.RemoteAddr().String(), "err", err)
		return
	}
	backend, err := net.DialTimeout("tcp", addr, orDefault(s.DialTimeout, DefaultDialTimeout))
	if err != nil {
		s.refuse(c, "unavailable", cluster, alertInternalError, "peer", c.RemoteAddr().String(), "addr", addr, "err", err)
		return
	}
	defer backend.Close()
	s.Metrics.connected(cluster, time.Since(start))
	if _, err := backend.Write(hello); err != nil {
		s.Log.Info("front door: backend closed before the hello was passed on", "cluster", cluster, "addr", addr, "err", err)
		return
	}
	a := s.activityOf(cluster)
	a.open.Add(1)
	a.last.Store(time.Now().UnixNano())
	s.Metrics.opened(cluster)
	defer func() {
		a.last.Store(time.Now().UnixNano())
		a.open.Add(-1)
		s.Metrics.closed(cluster)
	}()
	s.pipe(c, backend, cluster, a)
}

// refuse answers c with a TLS alert (none when description is 0: the peer spoke no TLS,
// or is to retry) and counts the refusal.
func (s *Server) refuse(c net.Conn, reason, cluster string, description byte, attrs ...any) {
	s.Metrics.refused(reason)
	if description != 0 {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write(alert(description))
	}
	s.Log.Info("front door: connection refused", append([]any{"reason", reason, "cluster", cluster}, attrs...)...)
}

// pipe copies both ways until both directions have ended. When one direction ends, the
// other side is told by a half-close, so a client's request still gets its answer; a
// stop of the Server closes both connections, which ends both copies. Bytes are counted
// as they pass, not when the connection ends: a watch may stay open for days.
func (s *Server) pipe(client, backend net.Conn, cluster string, a *activity) {
	in, out := s.Metrics.byteCounters(cluster)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		io.Copy(backend, &countingReader{r: client, add: in, a: a})
		closeWrite(backend)
	}()
	go func() {
		defer wg.Done()
		io.Copy(client, &countingReader{r: backend, add: out})
		closeWrite(client)
	}()
	wg.Wait()
}

// countingReader counts what it reads (no counter when add is nil) and, with an activity,
// stamps the time of every read that returned bytes: a client sending is a cluster in use.
// The count is taken when the bytes are read, before they are passed on, so the far side
// cannot see them before the counter does (counting after the write raced a client that
// reads the metric right after its answer).
type countingReader struct {
	r   io.Reader
	add func(float64)
	a   *activity
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		if c.add != nil {
			c.add(float64(n))
		}
		if c.a != nil {
			c.a.last.Store(time.Now().UnixNano())
		}
	}
	return n, err
}

// closeWrite half-closes c when it can (TCP), else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
