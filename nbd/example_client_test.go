package nbd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"

	"github.com/nhdkit/nhd/nbd"
)

// clientExampleServer serves a 1 MiB memory disk named "disk" on a unix socket
// and returns its URI and a function that stops it.
func clientExampleServer() (uri string, stop func()) {
	dir, err := os.MkdirTemp("", "nbdex")
	if err != nil {
		log.Fatal(err)
	}
	sock := filepath.Join(dir, "nbd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatal(err)
	}
	srv := &nbd.Server{Exports: []nbd.Export{{Name: "disk", Backend: nbd.NewMemDisk(1 << 20)}}}
	go srv.Serve(l)
	return "nbd+unix:///disk?socket=" + sock, func() {
		srv.Close()
		os.RemoveAll(dir)
	}
}

func ExampleDial() {
	uri, stop := clientExampleServer()
	defer stop()

	ctx := context.Background()
	c, err := nbd.Dial(ctx, uri)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, err := c.WriteAt([]byte("hello, block device"), 4096); err != nil {
		log.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 19)
	if _, err := c.ReadAt(buf, 4096); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d bytes, read back %q\n", c.Size(), buf)
	// Output: 1048576 bytes, read back "hello, block device"
}

func ExampleParseURI() {
	u, err := nbd.ParseURI("nbds://example.com//exports/disk%201?tls-hostname=storage.example")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(u.Network, u.Address, u.TLS, u.Export, u.TLSHostname)

	_, err = nbd.ParseURI("nbd+unix:///disk")
	fmt.Println(err)
	_, err = nbd.ParseURI("nbds://h/?tls-type=psk")
	fmt.Println(errors.Is(err, nbd.ErrBadURI))
	// Output:
	// tcp example.com:10809 true /exports/disk 1 storage.example
	// nbd: bad URI "nbd+unix:///disk": nbd+unix needs ?socket=PATH
	// true
}

func ExampleClient_WalkExtents() {
	uri, stop := clientExampleServer()
	defer stop()

	ctx := context.Background()
	c, err := nbd.Dial(ctx, uri)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteAt(make([]byte, 64<<10), 0); err != nil {
		log.Fatal(err)
	}
	var data, holes int64
	err = c.WalkExtents(ctx, nbd.MetaContextBaseAllocation, 0, c.Size(), func(off int64, e nbd.Extent) error {
		if e.Flags.Has(nbd.ExtentHole) {
			holes += int64(e.Length)
		} else {
			data += int64(e.Length)
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("described:", data+holes == c.Size())
	// Output: described: true
}

func ExampleListExports() {
	uri, stop := clientExampleServer()
	defer stop()

	exports, err := nbd.ListExports(context.Background(), uri)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range exports {
		fmt.Printf("%q\n", e.Name)
	}
	// Output: "disk"
}

// Read-ahead from one goroutine: the next block's request is in flight
// while the caller works on the one before; each Wait reads the replies
// that have come in.
func ExampleClient_StartRead() {
	uri, stop := clientExampleServer()
	defer stop()
	ctx := context.Background()
	c, err := nbd.Dial(ctx, uri)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for i := range 4 {
		if _, err := c.WriteAt([]byte{byte('a' + i), byte('a' + i)}, int64(i)*4096); err != nil {
			log.Fatal(err)
		}
	}

	var bufs [2][]byte
	var calls [2]nbd.Call
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	if calls[0], err = c.StartRead(ctx, bufs[0], 0, 0); err != nil {
		log.Fatal(err)
	}
	for i := range 4 {
		if i+1 < 4 {
			next := (i + 1) % 2
			if calls[next], err = c.StartRead(ctx, bufs[next], int64(i+1)*4096, 0); err != nil {
				log.Fatal(err)
			}
		}
		if err := calls[i%2].Wait(ctx); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("block %d: %s\n", i, bufs[i%2][:2])
	}
	// Output:
	// block 0: aa
	// block 1: bb
	// block 2: cc
	// block 3: dd
}

// Large writes to a trusted server on the same machine: the payloads go to
// the socket without a copy, and each buffer is reused only after its
// WriteAt returned, that is after the server read it.
func ExampleWithSplicedWrites() {
	uri, stop := clientExampleServer()
	defer stop()

	c, err := nbd.Dial(context.Background(), uri, nbd.WithSplicedWrites())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	buf := make([]byte, 256<<10)
	for i := range 4 {
		for j := range buf {
			buf[j] = byte(i)
		}
		if _, err := c.WriteAt(buf, int64(i)*int64(len(buf))); err != nil {
			log.Fatal(err)
		}
	}
	got := make([]byte, 1)
	for i := range 4 {
		if _, err := c.ReadAt(got, int64(i)*int64(len(buf))+1000); err != nil {
			log.Fatal(err)
		}
		fmt.Print(got[0], " ")
	}
	fmt.Println()
	// Output: 0 1 2 3
}
