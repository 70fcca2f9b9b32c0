package nbd_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/nhdkit/nhd/nbd"
)

// Serve a memory disk on a unix socket, use it through the package's
// client, and shut the server down gracefully.
func ExampleServer() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "nbd.sock")

	disk := nbd.NewMemDisk(16 << 20)
	srv := &nbd.Server{Exports: []nbd.Export{{Name: "disk", Description: "16 MiB in memory", Backend: disk}}}
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	go srv.Serve(l)

	c, err := nbd.Dial(context.Background(), "nbd+unix:///disk?socket="+sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	c.WriteAt([]byte("hello, disk"), 1<<20)
	c.Close()

	// Shutdown finishes requests in flight and flushes the backend.
	srv.Shutdown(context.Background())
	got := make([]byte, 11)
	disk.ReadAt(got, 1<<20)
	fmt.Printf("%q, %d KiB allocated\n", got, disk.Allocated()>>10)
	// Output: "hello, disk", 64 KiB allocated
}

// Serve one connection without a listener: the client dials through a
// net.Pipe, the server takes the other end with ServeConn.
func ExampleServer_ServeConn() {
	srv := &nbd.Server{Exports: []nbd.Export{{Backend: nbd.NewMemDisk(1 << 20)}}}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		client, server := net.Pipe()
		go srv.ServeConn(server)
		return client, nil
	}
	c, err := nbd.Dial(context.Background(), "nbd://in-process/", nbd.WithDialer(dial))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fmt.Println(c.Size(), c.Flags().Has(nbd.ExportCanMultiConn))
	// Output: 1048576 true
}

// A MemDisk allocates 64 KiB chunks on first write and reports the rest
// as holes that read as zeroes.
func ExampleMemDisk() {
	d := nbd.NewMemDisk(4 * nbd.MemDiskChunkSize)
	d.WriteAt([]byte{1}, nbd.MemDiskChunkSize+10)
	ext, _ := d.BlockStatus(context.Background(), 0, d.Size(), nil)
	for _, e := range ext {
		fmt.Println(e.Length, e.Flags)
	}
	// Output:
	// 65536 HOLE|ZERO
	// 65536 0
	// 131072 HOLE|ZERO
}

// A FileDisk serves a sparse file; its holes are found with SEEK_DATA and
// SEEK_HOLE and trims punch new ones.
func ExampleFileDisk() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "disk.img")
	f, _ := os.Create(path)
	f.Truncate(1 << 20)
	f.Close()

	d, err := nbd.OpenFileDiskWith(path, nbd.FileDiskOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	d.WriteAt(make([]byte, 8192), 0)
	d.Trim(context.Background(), 0, 4096)
	ext, _ := d.BlockStatus(context.Background(), 0, 16384, nil)
	for _, e := range ext {
		fmt.Println(e.Length, e.Flags)
	}
	// Output:
	// 4096 HOLE|ZERO
	// 4096 0
	// 8192 HOLE|ZERO
}
