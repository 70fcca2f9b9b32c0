// Command nbd-server serves a memory disk or a file over NBD with package
// nbd's embeddable server: a stand-in storage server for an NHD, and a
// small NBD server in its own right.
//
// Usage:
//
//	nbd-server -size 64M -unix /tmp/nbd.sock
//	nbd-server -file disk.img -tcp 127.0.0.1:10809 -name disk -readonly
//	nbd-server -size 1G -tcp :10809 -tls-cert cert.pem -tls-key key.pem -tls-require
//	nbd-server -size 1G -tcp :10809 -tls-cert cert.pem -tls-key key.pem -tls-ca ca.pem
//
// Clients reach it as nbd+unix:///NAME?socket=PATH or nbd://HOST:PORT/NAME
// (nbdinfo, nbdcopy, qemu-img, fio --ioengine=nbd, nbd-client). With
// -tls-ca it admits only clients whose certificate a CA in that PEM file
// signed (it implies -tls-require); libnbd's clients present one from
// nbds://...?tls-certificates=DIR, a directory holding ca-cert.pem,
// client-cert.pem and client-key.pem.
//
// The limits are nbd.Server's, each 0 for its default: -max-conns bounds
// the sessions (connections past their handshake; more are refused with
// a reason), -max-handshakes the connections still in their handshake (a
// new one pushes out the oldest), -handshake-timeout how long a handshake
// may take, -idle-timeout how long a session may sit idle (default
// never), -max-inflight the requests served at once per connection,
// -max-payload the largest read or write, and -buffer-memory the memory
// for request payloads and read replies of all connections together.
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
	name, description             string
	readOnly                      bool
	tlsCert, tlsKey               string
	tlsRequire                    bool
	tlsCA                         string
	maxInFlight, maxConns         int
	maxHandshakes                 int
	handshakeTimeout, idleTimeout time.Duration
	maxPayload, bufferMemory      string
	verbose                       bool
	grace                         time.Duration
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.size, "size", "64M", "size of the memory disk (suffixes K, M, G, T: powers of 1024)")
	fs.StringVar(&c.file, "file", "", "serve this file or block device instead of a memory disk")
	fs.StringVar(&c.unixPath, "unix", "", "listen on this unix socket")
	fs.StringVar(&c.tcpAddr, "tcp", "", "listen on this TCP address (HOST:PORT)")
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
	fs.StringVar(&c.maxPayload, "max-payload", "0", "largest read or write payload (0: default 64M)")
	fs.StringVar(&c.bufferMemory, "buffer-memory", "0", "memory for request payloads and read replies, all connections together (0: default 128M)")
	fs.BoolVar(&c.verbose, "v", false, "log connections (debug level)")
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
	if (c.unixPath == "") == (c.tcpAddr == "") {
		return nil, errors.New("give exactly one of -unix PATH and -tcp HOST:PORT")
	}
	return &c, nil
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
	backend, closeBackend, err := cfg.backend()
	if err != nil {
		return err
	}
	defer closeBackend()
	srv, err := cfg.server(backend, log)
	if err != nil {
		return err
	}
	l, err := cfg.listen()
	if err != nil {
		return err
	}
	if cfg.unixPath != "" {
		defer os.Remove(cfg.unixPath)
	}
	log.Info("serving", "addr", l.Addr().String(), "export", cfg.name, "size", backend.Size(), "readonly", cfg.readOnly, "tls", srv.TLSConfig != nil)
	return serve(ctx, srv, l, cfg.grace, log, ready)
}

// backend opens the file or makes the memory disk.
func (c *config) backend() (nbd.Backend, func(), error) {
	if c.file != "" {
		d, err := nbd.OpenFileDiskWith(c.file, nbd.FileDiskOptions{ReadOnly: c.readOnly})
		if err != nil {
			return nil, nil, err
		}
		return d, func() { d.Close() }, nil
	}
	n, err := parseSize(c.size)
	if err != nil {
		return nil, nil, fmt.Errorf("-size: %w", err)
	}
	return nbd.NewMemDisk(n), func() {}, nil
}

// server configures the nbd.Server of the backend.
func (c *config) server(backend nbd.Backend, log *slog.Logger) (*nbd.Server, error) {
	mp, err := parseSize(c.maxPayload)
	if err != nil || mp > 1<<31 {
		return nil, fmt.Errorf("-max-payload %q: want a size up to 2G", c.maxPayload)
	}
	bm, err := parseSize(c.bufferMemory)
	if err != nil {
		return nil, fmt.Errorf("-buffer-memory: %w", err)
	}
	srv := &nbd.Server{
		Exports:          []nbd.Export{{Name: c.name, Description: c.description, Backend: backend, ReadOnly: c.readOnly}},
		MaxInFlight:      c.maxInFlight,
		MaxConns:         c.maxConns,
		MaxHandshakes:    c.maxHandshakes,
		HandshakeTimeout: c.handshakeTimeout,
		IdleTimeout:      c.idleTimeout,
		MaxPayload:       uint32(mp),
		BufferMemory:     bm,
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

func (c *config) listen() (net.Listener, error) {
	if c.unixPath != "" {
		os.Remove(c.unixPath) // a stale socket from an earlier run
		return net.Listen("unix", c.unixPath)
	}
	return net.Listen("tcp", c.tcpAddr)
}

// serve runs srv on l until it fails, ctx ends or a signal arrives, then
// shuts it down, waiting at most grace for the requests in flight.
func serve(ctx context.Context, srv *nbd.Server, l net.Listener, grace time.Duration, log *slog.Logger, ready chan<- string) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	if ready != nil {
		ready <- l.Addr().String()
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("stopping: finishing requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, nbd.ErrServerClosed) && err == nil {
		err = serr
	}
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
