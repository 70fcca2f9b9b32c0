// Command nvme-target serves a memory disk, a file or an NBD export as an
// NVMe/TCP namespace with package nvme/tcp: the NHD's idea (a disk
// protocol carried to a network server) with today's disk protocol, and an
// NVMe-to-NBD bridge when the namespace is an NBD export.
//
// Usage:
//
//	nvme-target -tcp 127.0.0.1:4420 -nqn nqn.2026-01.io.nhd:disk -size 1G
//	nvme-target -tcp :4420 -nqn NQN -file disk.img
//	nvme-target -tcp :4420 -nqn NQN -uri nbd://server/export
//
// Linux reaches it with nvme-cli (`modprobe nvme-tcp`, then `nvme discover
// -t tcp -a ADDR -s PORT` and `nvme connect -t tcp -a ADDR -s PORT -n
// NQN`); this module's host with tcp.Dial. It logs with log/slog to stderr
// and stops on SIGINT or SIGTERM. -reply-timeout bounds how long a host
// may leave what the target writes untaken before its connection is
// closed (tcp.Server.ReplyTimeout, default 30s); -max-conns bounds the
// connections, and with them the memory busy queues may hold.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nhdkit/nhd/internal/size"
	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
	"github.com/nhdkit/nhd/nvme/tcp"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stderr, nil); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "nvme-target:", err)
		}
		os.Exit(2)
	}
}

type options struct {
	tcp, nqn, sizeFlag, file, uri string
	blockSize, queues, depth      int
	workers, maxConns             int
	replyTimeout                  time.Duration
	readOnly, verbose             bool
}

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("nvme-target", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors come back as one line
	o := &options{}
	fs.StringVar(&o.tcp, "tcp", "127.0.0.1:4420", "listen on this TCP address (HOST:PORT)")
	fs.StringVar(&o.nqn, "nqn", "nqn.2026-01.io.nhd:disk", "the subsystem's NQN")
	fs.StringVar(&o.sizeFlag, "size", "", "serve a memory disk of this size (suffixes K, M, G, T); the default is 1G")
	fs.StringVar(&o.file, "file", "", "serve this file or block device")
	fs.StringVar(&o.uri, "uri", "", "serve this NBD export (nbd://, nbd+unix:// URI)")
	fs.IntVar(&o.blockSize, "block-size", 512, "the namespace's block size: 512 or 4096")
	fs.IntVar(&o.queues, "queues", 0, "most I/O queues per controller (0: default 64)")
	fs.IntVar(&o.depth, "queue-depth", 0, "most entries per queue (0: default 128)")
	fs.IntVar(&o.workers, "queue-workers", 0, "most goroutines running a queue's slow commands beside its reader (0: one, a goroutine pair per queue)")
	fs.IntVar(&o.maxConns, "max-conns", 0, "most connections (queues, the admin queues included) served at once; a busy queue may hold twice -queue-depth x the largest transfer (0: default 1024)")
	fs.DurationVar(&o.replyTimeout, "reply-timeout", 0, "close a connection that takes no MiB of what the target writes for this long, freeing its queue (0: default 30s; negative: never)")
	fs.BoolVar(&o.readOnly, "readonly", false, "refuse writes")
	fs.BoolVar(&o.verbose, "v", false, "log connections (debug level)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.Usage()
		}
		return nil, err
	}
	n := 0
	for _, s := range []string{o.sizeFlag, o.file, o.uri} {
		if s != "" {
			n++
		}
	}
	switch {
	case fs.NArg() != 0:
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	case n > 1:
		return nil, errors.New("give at most one of -size, -file and -uri")
	case o.nqn == "" || o.nqn == nvme.DiscoveryNQN:
		return nil, fmt.Errorf("-nqn %q: give the subsystem an NQN of its own", o.nqn)
	case o.blockSize != 512 && o.blockSize != 4096:
		return nil, fmt.Errorf("-block-size %d: 512 or 4096", o.blockSize)
	case o.workers < 0:
		return nil, fmt.Errorf("-queue-workers %d: at least 0", o.workers)
	case o.maxConns < 0:
		return nil, fmt.Errorf("-max-conns %d: at least 0", o.maxConns)
	}
	if n == 0 {
		o.sizeFlag = "1G"
	}
	return o, nil
}

// backend opens what the options name; close releases it.
func (o *options) backend(ctx context.Context) (b nbd.Backend, close func() error, err error) {
	switch {
	case o.file != "":
		d, err := nbd.OpenFileDiskWith(o.file, nbd.FileDiskOptions{ReadOnly: o.readOnly})
		if err != nil {
			return nil, nil, err
		}
		return d, d.Close, nil
	case o.uri != "":
		c, err := nbd.Dial(ctx, o.uri)
		if err != nil {
			return nil, nil, err
		}
		return c, c.Close, nil
	}
	n, err := size.Parse(o.sizeFlag)
	if err != nil {
		return nil, nil, fmt.Errorf("-size: %w", err)
	}
	if n < int64(o.blockSize) {
		return nil, nil, fmt.Errorf("-size %s: smaller than a block", o.sizeFlag)
	}
	return nbd.NewMemDisk(n), func() error { return nil }, nil
}

// server returns the target the options describe, serving f.
func (o *options) server(f *nvme.Fabric, log *slog.Logger) *tcp.Server {
	return &tcp.Server{Fabric: f, Logger: log, MaxConns: o.maxConns, QueueWorkers: o.workers, ReplyTimeout: o.replyTimeout}
}

// run serves until ctx ends or a signal arrives. ready, if not nil,
// receives the listener's address once it accepts connections.
func run(ctx context.Context, args []string, stderr io.Writer, ready chan<- string) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	backend, closeBackend, err := o.backend(ctx)
	if err != nil {
		return err
	}
	defer closeBackend()
	f := &nvme.Fabric{
		Subsystems:  []*nvme.Subsystem{{NQN: o.nqn, Model: "nhd nvme-target", Namespaces: []nvme.Namespace{{Backend: backend, BlockSize: o.blockSize, ReadOnly: o.readOnly}}}},
		MaxIOQueues: o.queues,
		QueueDepth:  o.depth,
	}
	if err := f.Check(); err != nil {
		return err
	}
	l, err := net.Listen("tcp", o.tcp)
	if err != nil {
		return err
	}
	srv := o.server(f, log)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	log.Info("serving", "addr", l.Addr().String(), "nqn", o.nqn, "bytes", backend.Size(), "block", o.blockSize)
	if ready != nil {
		ready <- l.Addr().String()
	}
	select {
	case err = <-errc:
	case <-ctx.Done():
		log.Info("stopping")
	}
	srv.Close()
	if fl, ok := backend.(nbd.Flusher); ok {
		if ferr := fl.Flush(context.Background()); ferr != nil && err == nil {
			err = ferr
		}
	}
	if errors.Is(err, tcp.ErrServerClosed) {
		err = nil
	}
	return err
}
