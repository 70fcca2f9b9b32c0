// Command nbdcopy copies a disk image between NBD exports and local files
// with nbd.Copy, as libnbd's nbdcopy does:
//
//	nbdcopy [flags] SOURCE DESTINATION
//
// Each of SOURCE and DESTINATION is an NBD URI (nbd://, nbds://,
// nbd+unix://, nbds+unix://) or a path (a file or a block device). A
// destination path that does not exist is created as a sparse file of the
// source's size; it then reads as zeroes, so the source's holes are
// skipped (-destination-is-zero says the same of any destination).
// Otherwise holes are written with WRITE_ZEROES (or punched in a file).
//
// -connections opens that many connections to each NBD end that allows
// multi-conn (CAN_MULTI_CONN), and -requests requests are kept in flight
// per connection, each of at most -request-size bytes. Errors are printed
// on one line and exit with status 1 (2 for bad usage).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nhdkit/nhd/internal/size"
	"github.com/nhdkit/nhd/nbd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	var u usageError
	switch {
	case errors.As(err, &u):
		fmt.Fprintln(os.Stderr, "nbdcopy:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "nbdcopy:", err)
		os.Exit(1)
	}
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// config is what the command line asks for.
type config struct {
	src, dst    string
	connections int
	requests    int
	requestSize int64
	zero        bool
	noExtents   bool
	flush       bool
	progress    bool
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("nbdcopy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.connections, "connections", 4, "connections to each NBD end that allows multi-conn")
	fs.IntVar(&c.requests, "requests", 16, "requests in flight per connection")
	rs := fs.String("request-size", "256k", "bytes of one request (suffixes k, m)")
	fs.BoolVar(&c.zero, "destination-is-zero", false, "the destination reads as zeroes: skip the source's holes")
	fs.BoolVar(&c.noExtents, "no-extents", false, "copy every byte, without asking the source for its holes")
	fs.BoolVar(&c.flush, "flush", false, "flush the destination at the end")
	fs.BoolVar(&c.progress, "progress", false, "print progress and a summary on standard error")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: nbdcopy [flags] SOURCE DESTINATION (each an NBD URI or a path)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, usageError{err.Error()}
	}
	if fs.NArg() != 2 {
		return c, usageError{fmt.Sprintf("want SOURCE and DESTINATION, got %d arguments", fs.NArg())}
	}
	c.src, c.dst = fs.Arg(0), fs.Arg(1)
	n, err := size.Parse(*rs)
	if err != nil || n <= 0 || n > 1<<30 {
		return c, usageError{fmt.Sprintf("-request-size %q: want 1 to 1G", *rs)}
	}
	c.requestSize = n
	if c.connections < 1 || c.requests < 1 {
		return c, usageError{"-connections and -requests must be at least 1"}
	}
	return c, nil
}

// isURI tells an NBD URI from a path.
func isURI(s string) bool { return strings.Contains(s, "://") }

func run(ctx context.Context, args []string, stderr io.Writer) error {
	c, err := parse(args, stderr)
	if err != nil {
		return err
	}
	src, err := openSource(ctx, c)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, created, err := openDestination(ctx, c, src.Size())
	if err != nil {
		return err
	}
	defer dst.Close()
	conns := max(connections(src), connections(dst))
	opts := nbd.CopyOptions{
		RequestSize:       int(c.requestSize),
		Requests:          c.requests * conns,
		DestinationIsZero: c.zero || created,
		NoExtents:         c.noExtents,
		Flush:             c.flush,
	}
	var p *progress
	if c.progress {
		p = &progress{w: stderr, start: time.Now()}
		opts.Progress = p.update
	}
	st, err := nbd.Copy(ctx, dst, src, opts)
	if p != nil {
		p.finish(st, err)
	}
	if err != nil {
		return err
	}
	return dst.Close()
}

// disk is an end of the copy.
type disk interface {
	nbd.Backend
	io.Closer
}

func connections(d disk) int {
	if c, ok := d.(*nbd.Client); ok {
		return c.Connections()
	}
	return 1
}

func openSource(ctx context.Context, c config) (disk, error) {
	if isURI(c.src) {
		return nbd.Dial(ctx, c.src, nbd.WithConnections(c.connections))
	}
	return nbd.OpenFileDiskWith(c.src, nbd.FileDiskOptions{ReadOnly: true})
}

// openDestination opens the destination; a path that does not exist is
// created with the source's size (created reports it: it reads as zeroes).
func openDestination(ctx context.Context, c config, size int64) (d disk, created bool, err error) {
	if isURI(c.dst) {
		cl, err := nbd.Dial(ctx, c.dst, nbd.WithConnections(c.connections))
		return cl, false, err
	}
	fd, err := nbd.OpenFileDiskWith(c.dst, nbd.FileDiskOptions{})
	if errors.Is(err, os.ErrNotExist) {
		fd, err = nbd.CreateFileDisk(c.dst, size, nbd.FileDiskOptions{Exclusive: true})
		return fd, err == nil, err
	}
	return fd, false, err
}
