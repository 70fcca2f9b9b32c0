// Command aoe-target serves an ATA disk to the network with ATA over
// Ethernet, as vblade does: the host's AoE initiator (Linux's aoe driver)
// sends ATA commands in Ethernet frames, and each one runs through the
// registers of this module's ata.Device, whose sectors live in a file, in
// memory, or on an NBD export (host → AoE → ATA device → NBD).
//
//	aoe-target -iface eth1 -shelf 0 -slot 1 -file disk.img
//	aoe-target -iface eth1 -shelf 0 -slot 1 -size 512M
//	aoe-target -iface eth1 -shelf 0 -slot 1 -uri nbd://server/export
//
// -iface needs CAP_NET_RAW (an AF_PACKET socket). -unixgram PATH,PEER
// serves a QEMU -netdev dgram socket instead, without privileges.
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

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/ata/aoe"
	"github.com/nhdkit/nhd/internal/size"
	"github.com/nhdkit/nhd/nbd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "aoe-target:", err)
		os.Exit(1)
	}
}

type options struct {
	iface, unixgram, file, sizeArg, uri string
	shelf, slot, workers, bufcnt        int
	sync                                bool
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("aoe-target", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.iface, "iface", "", "network interface to serve on (AF_PACKET, needs CAP_NET_RAW)")
	fs.StringVar(&o.unixgram, "unixgram", "", "PATH,PEER: serve a QEMU -netdev dgram unix socket instead of -iface")
	fs.IntVar(&o.shelf, "shelf", 0, "AoE shelf (major) address")
	fs.IntVar(&o.slot, "slot", 1, "AoE slot (minor) address")
	fs.StringVar(&o.file, "file", "", "backing file (created with -size if missing)")
	fs.StringVar(&o.sizeArg, "size", "", "disk size, e.g. 512M: a memory disk unless -file is given")
	fs.StringVar(&o.uri, "uri", "", "NBD URI of the backing export (nbd://host[:port]/name, nbd+unix://...)")
	fs.IntVar(&o.workers, "workers", 0, "ATA devices on the backend, commands run at once (0: 1 on a file or memory, run on the reading goroutine; 4 on an NBD export)")
	fs.IntVar(&o.bufcnt, "bufcnt", aoe.DefaultBufferCount, "outstanding commands advertised to initiators (at least 2)")
	fs.BoolVar(&o.sync, "sync", false, "write through: flush the backend after every write (AoE has no flush command)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fs.PrintDefaults()
		}
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case (o.iface == "") == (o.unixgram == ""):
		return nil, errors.New("give exactly one of -iface and -unixgram")
	case o.shelf < 0 || o.shelf >= 0x0FFF || o.slot < 0 || o.slot >= 0xFF:
		return nil, fmt.Errorf("bad address e%d.%d: shelf 0-4094, slot 0-254", o.shelf, o.slot)
	case o.workers < 0 || o.bufcnt < 2 || o.bufcnt > 0xFFFF:
		return nil, errors.New("-workers must be at least 0 and -bufcnt 2-65535")
	case o.uri != "" && (o.file != "" || o.sizeArg != ""):
		return nil, errors.New("-uri excludes -file and -size")
	case o.uri == "" && o.file == "" && o.sizeArg == "":
		return nil, errors.New("give a backend: -file, -size or -uri")
	}
	if o.workers == 0 {
		o.workers = 1
		if o.uri != "" {
			o.workers = 4 // hide the NBD round trips
		}
	}
	return o, nil
}

// backend opens the disk's storage and returns it with its size in bytes
// and a function that releases it.
func backend(ctx context.Context, o *options) (ata.Backend, int64, func(), error) {
	var want int64
	if o.sizeArg != "" {
		n, err := size.Parse(o.sizeArg)
		if err != nil || n < 512 {
			return nil, 0, nil, fmt.Errorf("bad -size %q: %v", o.sizeArg, err)
		}
		want = n
	}
	switch {
	case o.uri != "":
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := nbd.Dial(dctx, o.uri)
		if err != nil {
			return nil, 0, nil, err
		}
		return c, c.Size(), func() { c.Close() }, nil
	case o.file != "":
		f, err := os.OpenFile(o.file, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, 0, nil, err
		}
		st, err := f.Stat()
		if err == nil && want > st.Size() {
			err = f.Truncate(want)
		}
		if err != nil {
			f.Close()
			return nil, 0, nil, err
		}
		return f, max(st.Size(), want), func() { f.Close() }, nil
	}
	return nbd.NewMemDisk(want), want, func() {}, nil
}

func transport(o *options) (aoe.Transport, error) {
	if o.iface != "" {
		return aoe.ListenPacket(o.iface)
	}
	path, peer, ok := strings.Cut(o.unixgram, ",")
	if !ok {
		return nil, errors.New("-unixgram wants PATH,PEER")
	}
	// A locally administered address for a socket that has none.
	mac := aoe.MAC{0x02, 0x00, 0x4E, 0x48, byte(o.shelf), byte(o.slot)}
	return aoe.ListenUnixgram(path, peer, mac, 1500)
}

func run(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	store, bytes, release, err := backend(ctx, o)
	if err != nil {
		return err
	}
	defer release()
	info := ata.DeviceInfo{Model: "NHD AoE target", Serial: fmt.Sprintf("e%d.%d", o.shelf, o.slot),
		Firmware: "nhd", Sectors: uint64(bytes / 512), WriteCache: !o.sync}
	if info.Sectors == 0 {
		return errors.New("the backend is smaller than one sector")
	}
	disk, err := aoe.NewDisk(uint16(o.shelf), uint8(o.slot), info, store, o.workers)
	if err != nil {
		return err
	}
	disk.BufferCount, disk.Firmware = uint16(o.bufcnt), 0x4000
	tr, err := transport(o)
	if err != nil {
		return err
	}
	defer tr.Close()
	fmt.Fprintf(out, "e%d.%d: %d sectors, %s, bufcnt %d, %d devices\n",
		o.shelf, o.slot, info.Sectors, tr.MAC(), o.bufcnt, o.workers)
	t := &aoe.Target{Transport: tr, Disks: []*aoe.Disk{disk}}
	err = t.Serve(ctx)
	if ferr := flushBackend(store); ferr != nil && err == nil {
		err = fmt.Errorf("flushing the backend as the target stops: %w", ferr)
	}
	return err
}

// flushBackend makes what the initiator wrote durable as the target stops,
// AoE having no flush command of its own: an NBD export's FLUSH, a file's
// fsync (a memory disk has nothing to do).
func flushBackend(store ata.Backend) error {
	switch s := store.(type) {
	case nbd.Flusher:
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return s.Flush(ctx)
	case interface{ Sync() error }:
		return s.Sync()
	}
	return nil
}
