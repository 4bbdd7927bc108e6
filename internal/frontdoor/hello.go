package frontdoor

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// errHelloRead stops crypto/tls right after it parsed the ClientHello: the front door
// only wants the server name, never to answer the handshake itself.
var errHelloRead = errors.New("client hello read")

// readHello reads one TLS ClientHello from r and returns its server name (SNI; "" when the
// client sent none) and every byte it read, which must be replayed to the backend before
// anything else so that the backend sees the handshake from its first byte.
//
// It lets crypto/tls parse the hello, not a hand-written parser: records split across
// reads, a hello split across records and every extension layout are then handled the
// way Go's own server handles them. The server side it starts is given a connection that
// can only be read from, and is abandoned from GetConfigForClient, before it has written
// a byte.
func readHello(r io.Reader) (serverName string, read []byte, err error) {
	var buf bytes.Buffer
	got := false
	hsErr := tls.Server(readOnlyConn{r: io.TeeReader(r, &buf)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			serverName, got = h.ServerName, true
			return nil, errHelloRead
		},
	}).Handshake()
	if !got {
		return "", buf.Bytes(), fmt.Errorf("no TLS ClientHello: %w", hsErr)
	}
	return serverName, buf.Bytes(), nil
}

// readOnlyConn is a net.Conn over a reader whose writes fail: the abandoned handshake in
// readHello may try to send an alert, which must not reach the client.
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (readOnlyConn) Write([]byte) (int, error)        { return 0, io.ErrClosedPipe }
func (readOnlyConn) Close() error                     { return nil }
func (readOnlyConn) LocalAddr() net.Addr              { return nil }
func (readOnlyConn) RemoteAddr() net.Addr             { return nil }
func (readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(time.Time) error { return nil }

// alert is a fatal TLS alert record, sent in the clear before any ServerHello: what the
// front door answers a hello it will not route, so that the client reports a TLS error
// naming the reason (Go: "remote error: tls: unrecognized name") instead of an EOF.
func alert(description byte) []byte {
	// type alert (21), legacy version TLS 1.2, length 2, level fatal (2), description
	return []byte{21, 3, 3, 0, 2, 2, description}
}

// TLS alert descriptions the front door sends (RFC 8446 section 6).
const (
	alertUnrecognizedName byte = 112 // no server name, or one no cluster has
	alertInternalError    byte = 80  // the cluster is known but its apiserver cannot be reached
)
