package nbd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Option configures Dial, NewClient and Negotiate.
type Option func(*clientConfig)

// DefaultClientMaxInFlight is the default bound on requests in flight on one
// connection, as libnbd suggests.
const DefaultClientMaxInFlight = 64

// maxRequestSize caps one READ or WRITE request whatever the server
// advertises (libnbd uses the same 64 MiB).
const maxRequestSize = 64 << 20

type clientConfig struct {
	export       string
	exportSet    bool
	tls          *tls.Config // nil: no TLS
	metaContexts []string
	noStructured bool
	maxInFlight  int
	connections  int
	dial         func(ctx context.Context, network, address string) (net.Conn, error)

	handshakeTimeout time.Duration
	requestTimeout   time.Duration
	softDiscTimeout  time.Duration // < 0: no bound

	splice    bool
	replySpin time.Duration
}

func newClientConfig(opts []Option) *clientConfig {
	c := &clientConfig{
		metaContexts: []string{MetaContextBaseAllocation},
		maxInFlight:  DefaultClientMaxInFlight,
		connections:  1,

		handshakeTimeout: DefaultClientHandshakeTimeout,
		softDiscTimeout:  DefaultClientSoftDisconnectTimeout,
		replySpin:        DefaultClientReplySpin,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithExportName chooses the export to connect to, overriding the name a
// URI gives. The default (for NewClient) is the empty name, which servers
// take as their default export.
func WithExportName(name string) Option {
	return func(c *clientConfig) { c.export, c.exportSet = name, true }
}

// WithTLS requires TLS, negotiated with NBD_OPT_STARTTLS as the first
// option, using a clone of cfg (crypto/tls, X.509 only: Go's crypto/tls has
// no external pre-shared keys, so servers configured only for PSK cannot be
// reached). The client presents cfg.Certificates to a server that asks
// for a client certificate (LoadTLSCertificates reads them from libnbd's
// directory layout). If the server cannot provide TLS the handshake fails with
// ErrTLSUnavailable; there is no fallback to plaintext. It overrides the
// TLS settings of a URI.
func WithTLS(cfg *tls.Config) Option {
	return func(c *clientConfig) {
		if cfg == nil {
			cfg = &tls.Config{}
		}
		c.tls = cfg.Clone()
	}
}

// LoadTLSCertificates reads a directory laid out as libnbd's
// tls-certificates (the parameter of an nbds URI, as nbdinfo and nbdcopy
// take it) into a configuration for WithTLS: ca-cert.pem holds the CAs
// that sign the server's certificate (required), and client-cert.pem with
// client-key.pem, when present, the certificate the client presents to a
// server that asks for one (a server requiring client certificates
// refuses a client without). The result verifies the server's name: set
// its ServerName to the name in the server's certificate. An nbds URI's
// tls-certificates parameter is read the same way by Dial.
func LoadTLSCertificates(dir string) (*tls.Config, error) {
	caFile := filepath.Join(dir, "ca-cert.pem")
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("nbd: tls-certificates: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("nbd: tls-certificates: no certificate in %s", caFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	certFile, keyFile := filepath.Join(dir, "client-cert.pem"), filepath.Join(dir, "client-key.pem")
	if _, err := os.Stat(certFile); err == nil {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("nbd: tls-certificates: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// WithMetaContexts chooses the metadata contexts to negotiate with
// NBD_OPT_SET_META_CONTEXT. The default is base:allocation alone; with no
// names, none are negotiated and BLOCK_STATUS is never sent. Contexts need
// structured replies.
func WithMetaContexts(names ...string) Option {
	return func(c *clientConfig) { c.metaContexts = append([]string(nil), names...) }
}

// WithStructuredReplies chooses whether to ask for structured replies
// (default true). Without them there are no holes, no block status and no
// error messages, but every server supports the simple replies.
func WithStructuredReplies(on bool) Option {
	return func(c *clientConfig) { c.noStructured = !on }
}

// WithMaxInFlight bounds the requests in flight on each connection (default
// DefaultClientMaxInFlight). A call that finds every slot taken waits for one, or
// for its context to end: backpressure, never an unbounded queue. n < 1 is
// taken as 1.
func WithMaxInFlight(n int) Option {
	return func(c *clientConfig) { c.maxInFlight = max(n, 1) }
}

// WithConnections asks Dial for n connections to the export (multi-conn).
// They are used only if the server advertises CAN_MULTI_CONN; otherwise the
// client keeps one. Requests are spread over the connections in turn, and
// Flush flushes every connection. NewClient, which is given one net.Conn,
// ignores it.
func WithConnections(n int) Option {
	return func(c *clientConfig) { c.connections = max(n, 1) }
}

// WithDialer replaces the function Dial uses to open connections (the
// default is a net.Dialer's DialContext).
func WithDialer(dial func(ctx context.Context, network, address string) (net.Conn, error)) Option {
	return func(c *clientConfig) { c.dial = dial }
}

// WithSplicedWrites makes the client hand WRITE payloads to the kernel
// without copying them, where it can: on Linux, over a TCP or unix socket
// without TLS, a batch of requests carrying at least zerocopy.SpliceMin bytes
// goes out by vmsplice(2) and splice(2) (zerocopy.Batch.SetSplice) rather
// than writev(2), which copies every byte. That copy, and the kernel pages
// it fills and the server's read then frees, are most of the CPU time of
// large writes on both sides of a connection to a server on the same
// machine (BenchmarkClientWriteSpliced; examples/nbdbench -splice).
// Where the kernel refuses, writes are copied as without the option.
//
// The price is that the socket keeps pointing at the caller's buffer after
// the request went out, until the server has read the payload. Every NBD
// server reads a WRITE's payload before it replies, so for a WRITE that
// completes (its reply came, with success or an error) nothing changes:
// the buffer is the caller's again when WriteAt returns, or Wait. A WRITE
// that ends without its reply (its context ended after it was sent, the
// connection failed) leaves its buffer to be read by the server until
// the connection is closed at both ends: its buffer must not be changed
// or reused meanwhile, or the server may store what it then holds. So
// use the option with servers trusted to read a payload before they
// answer it and to drop a connection that this client has closed, and
// with calls whose contexts do not end early (ReadAt and WriteAt without
// WithRequestTimeout have none).
func WithSplicedWrites() Option {
	return func(c *clientConfig) { c.splice = true }
}

// WithReplySpin sets how long a call alone on its connection (one request
// in flight) may spin on the empty socket for its reply before it parks on
// the network poller (default DefaultClientReplySpin; d <= 0 never spins).
// At depth one most of a request's time is the round trip, and a reply
// that comes while the caller spins saves the wake-up that would bring it
// back; but on some machines the spin's reads delay the reply more than
// the wake-up costs, and a server in this process cannot answer until the
// poller runs. So the connection times its waits for replies both ways
// and spins only while spinning has been the faster way, trying the other
// way for 64 waits in every 1024 to follow the machine
// (BenchmarkClientReplySpin; examples/nbdbench/sidebyside.sh's 4 KiB QD1
// job). After a spin that
// runs out (a slow server), the next read for a reply at depth one parks
// at once, then the next 2, 4, ... up to 1024 while spins keep running
// out. Spinning holds a processor meanwhile, and happens only on a
// connection with a socket descriptor (not TLS). A window above
// MaxClientReplySpin is taken as MaxClientReplySpin. A call's context that
// ends while its reader spins, and Close, take effect when the spin ends.
func WithReplySpin(d time.Duration) Option {
	return func(c *clientConfig) { c.replySpin = min(max(d, 0), MaxClientReplySpin) }
}

// Timeouts.

// DefaultClientHandshakeTimeout bounds the connection and handshake of Dial,
// DialNegotiator, ListExports and NewClient when WithHandshakeTimeout does
// not say otherwise: a Dial with context.Background() to a server that
// accepts and then says nothing fails after it with
// context.DeadlineExceeded.
const DefaultClientHandshakeTimeout = 30 * time.Second

// WithHandshakeTimeout bounds the connection and handshake of Dial,
// DialNegotiator, ListExports and NewClient to d, on top of their
// context: whichever ends first ends the handshake. The default is
// DefaultClientHandshakeTimeout; d <= 0 leaves the context alone to decide.
// Negotiate and the methods of a Negotiator are bounded by their context
// only.
func WithHandshakeTimeout(d time.Duration) Option {
	return func(c *clientConfig) { c.handshakeTimeout = d }
}

// WithRequestTimeout bounds each call that takes no context (ReadAt,
// WriteAt, WriteAtFUA) to d, as if it had been given a context with that
// timeout: past it the call returns context.DeadlineExceeded, and its
// request is abandoned as a cancelled one is (see Client). The default, 0,
// is no bound. A bounded call allocates nothing in steady state: the
// client keeps the contexts and timers of its bounded calls for the next
// ones (TestClientRequestTimeoutZeroAllocs).
func WithRequestTimeout(d time.Duration) Option {
	return func(c *clientConfig) { c.requestTimeout = d }
}

// DefaultClientSoftDisconnectTimeout bounds the soft disconnect a reply
// with ESHUTDOWN starts when WithSoftDisconnectTimeout does not say
// otherwise: a server that answers ESHUTDOWN and then leaves the other
// requests in flight unanswered holds them, and the connection, no longer
// than this.
const DefaultClientSoftDisconnectTimeout = 30 * time.Second

// WithSoftDisconnectTimeout bounds the soft disconnect that a reply with
// ESHUTDOWN starts on its connection (see ErrServerShutdown): the
// connection waits at most d for the requests in flight to be done (a
// request is in flight until its caller has its result: a Call until its
// Wait), then sends NBD_CMD_DISC and closes all the same, as proto.md
// lets a client do at any time. The requests still without a reply then
// fail with an error that matches both ErrServerShutdown and
// ErrConnectionLost (their outcome is unknown: a WRITE may or may not have
// reached the disk), and so does every later call on that connection.
// The default, 0, is DefaultClientSoftDisconnectTimeout; d < 0 waits for
// ever (until the replies come, or Close). Client.Shutdown meanwhile
// waits for the same requests, so d bounds it too. The timer exists only
// while a soft disconnect waits.
//
// Only the connection that got ESHUTDOWN is closed. With several
// (WithConnections) the Client goes on spreading calls over all of them,
// so the calls that land on that one fail as above while the others are
// served, and Flush, which flushes every connection, fails; the Client
// stays open until Close or Shutdown.
func WithSoftDisconnectTimeout(d time.Duration) Option {
	return func(c *clientConfig) {
		if d == 0 {
			d = DefaultClientSoftDisconnectTimeout
		}
		c.softDiscTimeout = d
	}
}

// handshakeContext bounds ctx by the handshake timeout.
func (cfg *clientConfig) handshakeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if cfg.handshakeTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, cfg.handshakeTimeout)
}
