package nbdtest

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// Server is a running in-process NBD server.
type Server struct {
	// URI reaches the export: nbd+unix:///NAME?socket=PATH, or
	// nbd://127.0.0.1:PORT/NAME with WithTCP.
	URI string
	// Network and Address are the listener's ("unix", path or "tcp",
	// host:port).
	Network, Address string
	// Disk is the memory disk served, nil when WithBackend gave another.
	Disk *nbd.MemDisk
	// Server is the server itself, for Shutdown or Close before the end.
	Server *nbd.Server
}

type config struct {
	size     int64
	name     string
	readOnly bool
	tcp      bool
	backend  nbd.Backend
	tweak    []func(*nbd.Server)
}

// Option configures Start.
type Option func(*config)

// WithSize sets the size of the memory disk (default 64 MiB).
func WithSize(n int64) Option { return func(c *config) { c.size = n } }

// WithExportName names the export (default "", the default export).
func WithExportName(name string) Option { return func(c *config) { c.name = name } }

// WithReadOnly serves the export read-only.
func WithReadOnly() Option { return func(c *config) { c.readOnly = true } }

// WithTCP listens on 127.0.0.1 instead of a unix socket.
func WithTCP() Option { return func(c *config) { c.tcp = true } }

// WithBackend serves b instead of a new memory disk.
func WithBackend(b nbd.Backend) Option { return func(c *config) { c.backend = b } }

// WithServer lets f adjust the server (limits, TLS, more exports) before
// it starts.
func WithServer(f func(*nbd.Server)) Option {
	return func(c *config) { c.tweak = append(c.tweak, f) }
}

// Start starts a server for the test t and returns it once it accepts
// connections. When the test ends the server is shut down gracefully
// (Close after 5 seconds) and its socket removed.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg := config{size: 64 << 20}
	for _, o := range opts {
		o(&cfg)
	}
	srv := &Server{}
	b := cfg.backend
	if b == nil {
		srv.Disk = nbd.NewMemDisk(cfg.size)
		b = srv.Disk
	}
	s := &nbd.Server{Exports: []nbd.Export{{Name: cfg.name, Backend: b, ReadOnly: cfg.readOnly, Description: "nbdtest"}}}
	for _, f := range cfg.tweak {
		f(s)
	}
	srv.Server = s
	var l net.Listener
	var err error
	if cfg.tcp {
		l, err = net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			srv.Network, srv.Address = "tcp", l.Addr().String()
			srv.URI = "nbd://" + srv.Address + "/" + escapeName(cfg.name)
		}
	} else {
		// Short path: sun_path holds 107 bytes; t.TempDir grows with the
		// test name.
		dir, derr := os.MkdirTemp("", "nbdtest")
		if derr != nil {
			t.Fatal(derr)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		path := filepath.Join(dir, "nbd.sock")
		l, err = net.Listen("unix", path)
		if err == nil {
			srv.Network, srv.Address = "unix", path
			srv.URI = "nbd+unix:///" + escapeName(cfg.name) + "?socket=" + url.QueryEscape(path)
		}
	}
	if err != nil {
		t.Fatalf("nbdtest: listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("nbdtest: shutdown: %v", err)
		}
		if err := <-done; err != nil && !errors.Is(err, nbd.ErrServerClosed) {
			t.Errorf("nbdtest: serve: %v", err)
		}
	})
	return srv
}

// escapeName percent-encodes an export name for a URI path (uri.md: the
// path without its leading slash is the name).
func escapeName(name string) string {
	return (&url.URL{Path: name}).EscapedPath()
}
