// Command ata2nbd is the smallest NHD: an ATA disk whose sectors live on an
// NBD server. The host side writes and reads 64 KiB through the device's
// registers by DMA; the device turns each command into NBD requests.
//
//	go run ./examples/ata2nbd                        # an in-process server
//	go run ./examples/ata2nbd nbd://localhost/disk   # any NBD server
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/dma"
	"github.com/nhdkit/nhd/nbd"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ata2nbd:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	uri := "" // no argument: serve a 1 GiB memory disk in this process
	if len(args) > 0 {
		uri = args[0]
	} else {
		dir, err := os.MkdirTemp("", "ata2nbd")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		sock := filepath.Join(dir, "nbd.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			return err
		}
		srv := &nbd.Server{Exports: []nbd.Export{{Backend: nbd.NewMemDisk(1 << 30)}}}
		go srv.Serve(l)
		defer srv.Close()
		uri = "nbd+unix:///?socket=" + sock
	}
	client, err := nbd.Dial(ctx, uri) // the back end
	if err != nil {
		return err
	}
	defer client.Close()
	eng, err := dma.New(dma.Config{}) // streaming through a sector FIFO
	if err != nil {
		return err
	}
	defer eng.Close()
	sectors := uint64(client.Size() / 512)
	dev, err := ata.NewDevice(ata.Config{ // the front end
		Info:    ata.DeviceInfo{Model: "ata2nbd", Serial: "1", Firmware: "1", Sectors: sectors, WriteCache: true},
		Backend: client, // the NBD client is an io.ReaderAt and io.WriterAt
		DMA:     eng,
	})
	if err != nil {
		return err
	}
	host, id, err := ata.Attach(dev, eng) // the host's driver learns the disk; the engine is its bus master
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %q, %d sectors of %d bytes\n", uri, id.Model(), id.Sectors(), id.LogicalSectorSize())

	data := bytes.Repeat([]byte("NHD!"), 64<<10/4)
	write := ata.Command{Op: ata.CmdWriteDMAExt, Addressing: ata.AddrLBA48, LBA: 2048, Count: 128}
	read, flush, back := write, ata.Command{Op: ata.CmdFlushCacheExt}, make([]byte, len(data))
	read.Op = ata.CmdReadDMAExt
	for _, step := range []struct {
		c   *ata.Command
		buf []byte
	}{{&write, data}, {&read, back}, {&flush, nil}} {
		if err := host.Exec(step.c, step.buf); err != nil {
			return fmt.Errorf("%v: %w", step.c.Op, err)
		}
		fmt.Fprintf(out, "%v: ok\n", step.c.Op)
	}
	if !bytes.Equal(back, data) {
		return fmt.Errorf("the data read back differs from what was written")
	}
	fmt.Fprintf(out, "verified %d bytes through ATA -> DMA -> NBD and back\n", len(data))
	return nil
}
