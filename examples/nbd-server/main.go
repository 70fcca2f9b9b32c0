// Command nbd-server serves a memory disk, a file or another NBD server's
// export over NBD with package nbd's embeddable server: a stand-in storage
// server for an NHD, and a small NBD server (or proxy) in its own right.
//
// Usage:
//
//	nbd-server -size 64M -unix /tmp/nbd.sock
//	nbd-server -file disk.img -tcp 127.0.0.1:10809 -name disk -readonly
//	nbd-server -uri 'nbd+unix:///?socket=/tmp/up.sock' -tcp :10809
//	nbd-server -size 1G -tcp :10809 -tls-cert cert.pem -tls-key key.pem -tls-require
//	nbd-server -size 1G -tcp :10809 -tls-cert cert.pem -tls-key key.pem -tls-ca ca.pem
//	nbd-server -file disk.img -inetd            (from inetd or systemd Accept=yes)
//	systemd-socket-activate -l 10809 nbd-server -file disk.img
//
// -uri serves the export an NBD URI names (nbd.Dial, up to -connections
// connections when the upstream allows several), as the upstream describes
// it (nbd.ExportOf: size, read-only, block sizes, CAN_MULTI_CONN); -name,
// -description and -readonly still apply.
//
// Connections come from exactly one place: -unix or -tcp (a socket it
// listens on), socket activation (the listening sockets a service manager
// passed from descriptor 3 on, LISTEN_FDS of them, with LISTEN_PID this
// process or unset), or -inetd (one client on standard input and output,
// which must be a socket; the command exits when that client is done).
//
// Clients reach it as nbd+unix:///NAME?socket=PATH or nbd://HOST:PORT/NAME
// (nbdinfo, nbdcopy, qemu-img, fio --ioengine=nbd, nbd-client). With
// -tls-ca it admits only clients whose certificate a CA in that PEM file
// signed (it implies -tls-require); libnbd's clients present one from
// nbds://...?tls-certificates=DIR, a directory holding ca-cert.pem,
// client-cert.pem and client-key.pem.
//
// The limits are nbd.Server's, each 0 for its default: -max-conns bounds
// the sessions (connections past their handshake; when all are taken, a
// new client takes the place of the session idle longest, if idle for
// -evict-idle-after, else it is refused with a reason), -max-handshakes the connections still in their handshake (a
// new one pushes out the oldest), -handshake-timeout how long a handshake
// may take, -idle-timeout how long a session may sit idle (default
// never), -reply-timeout how long a session may leave its replies unread
// (default 30s), -max-inflight the requests served at once per connection,
// -max-payload the largest read or write, -buffer-memory the memory
// for request payloads and read replies of all connections together, and
// -conn-buffer-memory one connection's share of it (default a quarter; -1:
// none), so that a client that reads no reply holds up no other.
// With -free-os-memory (the default) the memory those buffers took goes
// back to the system once they have been idle for a second, rather than
// at the Go runtime's pace, so the resident size returns to its idle level
// after a burst.
//
// It logs with log/slog to stderr (-v: every connection) and stops
// cleanly on SIGINT or SIGTERM: it stops accepting, finishes the requests
// in flight, flushes, and exits 0. If -shutdown-timeout runs out first, it
// abandons the requests left, still flushes every write it acknowledged,
// and exits 1.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "nbd-server:", err)
		os.Exit(1)
	}
}

// config is what the command line says. Each flag is a field, registered
// in register: a new flag is a field and a line there.
type config struct {
	size, file, unixPath, tcpAddr string
	uri                           string
	connections                   int
	inetd                         bool
	name, description             string
	readOnly                      bool
	tlsCert, tlsKey               string
	tlsRequire                    bool
	tlsCA                         string
	maxInFlight, maxConns         int
	maxHandshakes                 int
	handshakeTimeout, idleTimeout time.Duration
	evictIdleAfter, replyTimeout  time.Duration
	maxPayload, bufferMemory      string
	connBufferMemory              string
	verbose                       bool
	freeOSMemory                  bool
	grace                         time.Duration
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.size, "size", "64M", "size of the memory disk (suffixes K, M, G, T: powers of 1024)")
	fs.StringVar(&c.file, "file", "", "serve this file or block device instead of a memory disk")
	fs.StringVar(&c.uri, "uri", "", "serve the export this NBD URI names (a proxy) instead of a memory disk")
	fs.IntVar(&c.connections, "connections", 4, "with -uri: connections to the upstream, when it allows several")
	fs.StringVar(&c.unixPath, "unix", "", "listen on this unix socket")
	fs.StringVar(&c.tcpAddr, "tcp", "", "listen on this TCP address (HOST:PORT)")
	fs.BoolVar(&c.inetd, "inetd", false, "serve one client on standard input and output (a socket), then exit")
	fs.StringVar(&c.name, "name", "", "export name (\"\" is the default export)")
	fs.StringVar(&c.description, "description", "", "export description")
	fs.BoolVar(&c.readOnly, "readonly", false, "serve the export read-only")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "TLS certificate (PEM); enables STARTTLS")
	fs.StringVar(&c.tlsKey, "tls-key", "", "TLS private key (PEM)")
	fs.BoolVar(&c.tlsRequire, "tls-require", false, "refuse clients that do not start TLS")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "admit only clients with a certificate signed by a CA in this PEM file (implies -tls-require)")
	fs.IntVar(&c.maxInFlight, "max-inflight", 0, "requests served at once per connection (0: default 16)")
	fs.IntVar(&c.maxConns, "max-conns", 0, "sessions (connections past their handshake) served at once; more are refused with a reason (0: default 256)")
	fs.IntVar(&c.maxHandshakes, "max-handshakes", 0, "connections in their handshake at once; a new one pushes out the oldest (0: default 128)")
	fs.DurationVar(&c.handshakeTimeout, "handshake-timeout", 0, "how long a connection may take to finish its handshake (0: default 30s)")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 0, "close a session idle for this long (0: never)")
	fs.DurationVar(&c.replyTimeout, "reply-timeout", 0, "close a session that takes no MiB of its replies for this long, freeing their buffers (0: default 30s; negative: never)")
	fs.DurationVar(&c.evictIdleAfter, "evict-idle-after", 0, "when -max-conns sessions are served, a new client takes the place of the session idle longest if idle this long, closing it (0: default 1s; negative: never, refuse the new client)")
	fs.StringVar(&c.maxPayload, "max-payload", "0", "largest read or write payload (0: default 64M)")
	fs.StringVar(&c.bufferMemory, "buffer-memory", "0", "memory for request payloads and read replies, all connections together (0: default 128M)")
	fs.StringVar(&c.connBufferMemory, "conn-buffer-memory", "0", "one connection's share of -buffer-memory: it starts no request needing buffers while it holds that much (0: a quarter of it; -1: no share)")
	fs.BoolVar(&c.verbose, "v", false, "log connections (debug level)")
	fs.BoolVar(&c.freeOSMemory, "free-os-memory", true, "return memory to the system as soon as the payload buffers go idle or the last client leaves (a forced garbage collection)")
	fs.DurationVar(&c.grace, "shutdown-timeout", 30*time.Second, "how long a stop waits for requests in flight")
}

// parseArgs reads the command line into a config.
func parseArgs(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("nbd-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if n := countTrue(c.unixPath != "", c.tcpAddr != "", c.inetd); n > 1 {
		return nil, errors.New("give at most one of -unix PATH, -tcp HOST:PORT and -inetd")
	}
	if c.uri != "" && c.file != "" {
		return nil, errors.New("give at most one of -file and -uri")
	}
	return &c, nil
}

func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// run serves until ctx ends or a signal arrives. ready, if not nil,
// receives the listener's address once it accepts connections.
func run(ctx context.Context, args []string, stderr io.Writer, ready chan<- string) error {
	cfg, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if cfg.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	export, closeBackend, err := cfg.export(ctx)
	if err != nil {
		return err
	}
	// Deferred first, run last: after serve has waited for Shutdown.
	defer closeBackend()
	srv, err := cfg.server(export, log)
	if err != nil {
		return err
	}
	ls, err := cfg.listen()
	if err != nil {
		return err
	}
	if cfg.unixPath != "" {
		defer os.Remove(cfg.unixPath)
	}
	log.Info("serving", "addrs", addrs(ls), "inetd", cfg.inetd, "export", cfg.name, "size", export.Backend.Size(),
		"readonly", export.ReadOnly, "upstream", cfg.uri, "tls", srv.TLSConfig != nil)
	if cfg.inetd {
		nc, err := stdioConn()
		if err != nil {
			return err
		}
		return serveConn(ctx, srv, nc, cfg.grace, log)
	}
	return serve(ctx, srv, ls, cfg.grace, log, ready)
}

func addrs(ls []net.Listener) []string {
	var a []string
	for _, l := range ls {
		a = append(a, l.Addr().String())
	}
	return a
}

// export opens the file, dials the upstream or makes the memory disk, and
// returns its export with the function that closes it.
func (c *config) export(ctx context.Context) (nbd.Export, func(), error) {
	e := nbd.Export{Name: c.name, Description: c.description, ReadOnly: c.readOnly}
	switch {
	case c.uri != "":
		cl, err := nbd.Dial(ctx, c.uri, nbd.WithConnections(max(c.connections, 1)))
		if err != nil {
			return e, nil, fmt.Errorf("-uri: %w", err)
		}
		up := nbd.ExportOf(cl, c.name)
		up.ReadOnly = up.ReadOnly || c.readOnly
		if c.description != "" {
			up.Description = c.description
		}
		return up, func() { cl.Close() }, nil
	case c.file != "":
		d, err := nbd.OpenFileDiskWith(c.file, nbd.FileDiskOptions{ReadOnly: c.readOnly})
		if err != nil {
			return e, nil, err
		}
		e.Backend = d
		return e, func() { d.Close() }, nil
	}
	n, err := parseSize(c.size)
	if err != nil {
		return e, nil, fmt.Errorf("-size: %w", err)
	}
	e.Backend = nbd.NewMemDisk(n)
	return e, func() {}, nil
}

// server configures the nbd.Server of the export.
func (c *config) server(export nbd.Export, log *slog.Logger) (*nbd.Server, error) {
	mp, err := parseSize(c.maxPayload)
	if err != nil || mp > 1<<31 {
		return nil, fmt.Errorf("-max-payload %q: want a size up to 2G", c.maxPayload)
	}
	bm, err := parseSize(c.bufferMemory)
	if err != nil {
		return nil, fmt.Errorf("-buffer-memory: %w", err)
	}
	cbm := int64(-1)
	if c.connBufferMemory != "-1" {
		if cbm, err = parseSize(c.connBufferMemory); err != nil {
			return nil, fmt.Errorf("-conn-buffer-memory: %w", err)
		}
	}
	srv := &nbd.Server{
		Exports:          []nbd.Export{export},
		MaxInFlight:      c.maxInFlight,
		MaxConns:         c.maxConns,
		MaxHandshakes:    c.maxHandshakes,
		HandshakeTimeout: c.handshakeTimeout,
		IdleTimeout:      c.idleTimeout,
		EvictIdleAfter:   c.evictIdleAfter,
		ReplyTimeout:     c.replyTimeout,
		MaxPayload:       uint32(mp),
		BufferMemory:     bm,
		ConnBufferMemory: cbm,
		FreeOSMemory:     c.freeOSMemory,
		RequireTLS:       c.tlsRequire || c.tlsCA != "",
		Logger:           log,
	}
	if c.tlsCert != "" || c.tlsKey != "" {
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("TLS: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if c.tlsCA != "" {
		if err := requireClientCerts(srv, c.tlsCA); err != nil {
			return nil, err
		}
	}
	return srv, nil
}

// requireClientCerts admits only clients whose certificate a CA in the
// PEM file at path signed.
func requireClientCerts(srv *nbd.Server, path string) error {
	if srv.TLSConfig == nil {
		return errors.New("-tls-ca needs -tls-cert and -tls-key")
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("-tls-ca %s: no PEM certificate", path)
	}
	srv.TLSConfig.ClientCAs, srv.TLSConfig.ClientAuth = pool, tls.RequireAndVerifyClientCert
	return nil
}

// serve runs srv on the listeners until one fails, ctx ends or a signal
// arrives, then shuts it down, waiting at most grace for the requests in
// flight.
func serve(ctx context.Context, srv *nbd.Server, ls []net.Listener, grace time.Duration, log *slog.Logger, ready chan<- string) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, len(ls))
	for _, l := range ls {
		go func() { served <- srv.Serve(l) }()
	}
	if ready != nil {
		ready <- ls[0].Addr().String()
	}
	var failed error
	left := len(ls)
	select {
	case failed = <-served:
		left--
		log.Warn("a listener failed: stopping", "err", failed)
	case <-ctx.Done():
		log.Info("stopping: finishing requests in flight")
	}
	err := shutdown(srv, grace, log)
	for range left {
		if serr := <-served; !errors.Is(serr, nbd.ErrServerClosed) && failed == nil {
			failed = serr
		}
	}
	return errors.Join(failed, err)
}

// serveConn serves one connection (-inetd) until its client is done, ctx
// ends or a signal arrives, then shuts srv down, flushing the backend.
func serveConn(ctx context.Context, srv *nbd.Server, nc net.Conn, grace time.Duration, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.ServeConn(nc) }()
	var failed error
	done := false
	select {
	case failed = <-served:
		done = true
	case <-ctx.Done():
		log.Info("stopping: finishing requests in flight")
	}
	err := shutdown(srv, grace, log)
	if !done {
		if serr := <-served; serr != nil && !errors.Is(serr, nbd.ErrServerClosed) {
			failed = serr
		}
	}
	return errors.Join(failed, err)
}

// shutdown stops srv, waiting at most grace for the requests in flight,
// and returns once every acknowledged write is flushed: only then may the
// backend be closed (Serve returns as soon as Shutdown starts).
func shutdown(srv *nbd.Server, grace time.Duration, log *slog.Logger) error {
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	switch {
	case err == nil:
		log.Info("stopped")
	case errors.Is(err, context.DeadlineExceeded):
		// Shutdown still flushed what it had acknowledged.
		log.Warn("stopped after -shutdown-timeout: requests in flight abandoned, acknowledged writes flushed", "err", err)
	}
	return err
}

// parseSize reads a byte count with an optional K, M, G or T suffix.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch u := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(s, "B"), "i")); {
	case strings.HasSuffix(u, "K"):
		mult, s = 1<<10, u[:len(u)-1]
	case strings.HasSuffix(u, "M"):
		mult, s = 1<<20, u[:len(u)-1]
	case strings.HasSuffix(u, "G"):
		mult, s = 1<<30, u[:len(u)-1]
	case strings.HasSuffix(u, "T"):
		mult, s = 1<<40, u[:len(u)-1]
	default:
		s = u
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}
