package tcp

import (
	"bytes"
	"context"
	"net"
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

// A Host is an nbd.Backend: nbd.Server exports an NVMe/TCP namespace, and
// writes, zeroes, trims and flushes through an NBD client land on the
// namespace's disk.
func TestHostServedByNBD(t *testing.T) {
	disk := nbd.NewMemDisk(4 << 20)
	_, addr := startServer(t, disk, 512)
	h := dialTest(t, addr, &Config{IOQueues: 2})
	srv := &nbd.Server{Exports: []nbd.Export{{Name: "nvme", Backend: h}}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	ctx := context.Background()
	c, err := nbd.Dial(ctx, "nbd://"+l.Addr().String()+"/nvme")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Size() != 4<<20 {
		t.Fatalf("NBD export of %d bytes", c.Size())
	}
	data := bytes.Repeat([]byte("NVMe behind NBD "), 8192)
	if _, err := c.WriteAt(data, 65536); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteZeroes(ctx, 65536, 4096, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Trim(ctx, 65536+8192, 4096); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	clear(data[:4096])
	clear(data[8192 : 8192+4096])
	got := make([]byte, len(data))
	if _, err := disk.ReadAt(got, 65536); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the namespace's disk does not hold what the NBD client wrote (%v)", err)
	}
}
