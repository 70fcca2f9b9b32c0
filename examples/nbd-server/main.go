// Command nbd-server serves a memory disk or a file over NBD with package
// nbd's embeddable server: a stand-in storage server for an NHD, and a
// small NBD server in its own right.
//
// Usage:
//
//	nbd-server -size 64M -unix /tmp/nbd.sock
//	nbd-server -file disk.img -tcp 127.0.0.1:10809 -name disk -readonly
//	nbd-server -size 1G -tcp :10809 -tls-cert cert.pem -tls-key key.pem -tls-require
//	nbd-server -size 1G -tcp :10809 -tls-cert cert.pem -tls-key key.pem -tls-ca clients-ca.pem
//
// Clients reach it as nbd+unix:///NAME?socket=PATH or nbd://HOST:PORT/NAME
// (nbdinfo, nbdcopy, qemu-img, fio --ioengine=nbd, nbd-client). It logs
// with log/slog to stderr and stops cleanly on SIGINT or SIGTERM: it stops
// accepting, finishes the requests in flight, flushes, and exits.
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

// run serves until ctx ends or a signal arrives. ready, if not nil,
// receives the listener's address once it accepts connections.
func run(ctx context.Context, args []string, stderr io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("nbd-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		sizeFlag    = fs.String("size", "64M", "size of the memory disk (suffixes K, M, G, T: powers of 1024)")
		file        = fs.String("file", "", "serve this file or block device instead of a memory disk")
		unixPath    = fs.String("unix", "", "listen on this unix socket")
		tcpAddr     = fs.String("tcp", "", "listen on this TCP address (HOST:PORT)")
		name        = fs.String("name", "", "export name (\"\" is the default export)")
		description = fs.String("description", "", "export description")
		readOnly    = fs.Bool("readonly", false, "serve the export read-only")
		tlsCert     = fs.String("tls-cert", "", "TLS certificate (PEM); enables STARTTLS")
		tlsKey      = fs.String("tls-key", "", "TLS private key (PEM)")
		tlsRequire  = fs.Bool("tls-require", false, "refuse clients that do not start TLS")
		tlsCA       = fs.String("tls-ca", "", "admit only clients with a certificate signed by a CA in this PEM file (implies -tls-require)")
		maxInFlight = fs.Int("max-inflight", 0, "requests served at once per connection (0: default 16)")
		maxConns    = fs.Int("max-conns", 0, "connections served at once (0: default 256)")
		maxPayload  = fs.String("max-payload", "0", "largest read or write payload (0: default 32M)")
		verbose     = fs.Bool("v", false, "log connections (debug level)")
		grace       = fs.Duration("shutdown-timeout", 30*time.Second, "how long a stop waits for requests in flight")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	if (*unixPath == "") == (*tcpAddr == "") {
		return errors.New("give exactly one of -unix PATH and -tcp HOST:PORT")
	}
	var backend nbd.Backend
	if *file != "" {
		d, err := nbd.OpenFileDisk(*file, *readOnly)
		if err != nil {
			return err
		}
		defer d.Close()
		backend = d
	} else {
		n, err := parseSize(*sizeFlag)
		if err != nil {
			return fmt.Errorf("-size: %w", err)
		}
		backend = nbd.NewMemDisk(n)
	}
	mp, err := parseSize(*maxPayload)
	if err != nil || mp > 1<<31 {
		return fmt.Errorf("-max-payload %q: want a size up to 2G", *maxPayload)
	}
	srv := &nbd.Server{
		Exports:     []nbd.Export{{Name: *name, Description: *description, Backend: backend, ReadOnly: *readOnly}},
		MaxInFlight: *maxInFlight,
		MaxConns:    *maxConns,
		MaxPayload:  uint32(mp),
		RequireTLS:  *tlsRequire || *tlsCA != "",
		Logger:      log,
	}
	if *tlsCert != "" || *tlsKey != "" {
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if *tlsCA != "" {
		if srv.TLSConfig == nil {
			return errors.New("-tls-ca needs -tls-cert and -tls-key")
		}
		pem, err := os.ReadFile(*tlsCA)
		if err != nil {
			return fmt.Errorf("-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-tls-ca %s: no PEM certificate", *tlsCA)
		}
		srv.TLSConfig.ClientCAs, srv.TLSConfig.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}

	var l net.Listener
	if *unixPath != "" {
		os.Remove(*unixPath) // a stale socket from an earlier run
		l, err = net.Listen("unix", *unixPath)
	} else {
		l, err = net.Listen("tcp", *tcpAddr)
	}
	if err != nil {
		return err
	}
	if *unixPath != "" {
		defer os.Remove(*unixPath)
	}
	log.Info("serving", "addr", l.Addr().String(), "export", *name, "size", backend.Size(), "readonly", *readOnly, "tls", srv.TLSConfig != nil)

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
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, nbd.ErrServerClosed) && err == nil {
		err = serr
	}
	if err == nil {
		log.Info("stopped")
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
