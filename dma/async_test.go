package dma_test

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/dma"
	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

// An NBD client is an asynchronous backend as it is: no adapter.
var (
	_ dma.AsyncReaderAt = (*nbd.Client)(nil)
	_ dma.AsyncWriterAt = (*nbd.Client)(nil)
)

// eioDisk fails reads and writes of the byte at bad with EIO.
type eioDisk struct {
	*nbd.MemDisk
	bad int64
}

func (d eioDisk) hits(p []byte, off int64) bool { return off <= d.bad && d.bad < off+int64(len(p)) }

func (d eioDisk) ReadAt(p []byte, off int64) (int, error) {
	if d.hits(p, off) {
		return 0, syscall.EIO
	}
	return d.MemDisk.ReadAt(p, off)
}

func (d eioDisk) WriteAt(p []byte, off int64) (int, error) {
	if d.hits(p, off) {
		return 0, syscall.EIO
	}
	return d.MemDisk.WriteAt(p, off)
}

// TestEngineNBDClient: an inline engine streams a 64 KiB transfer to and
// from an *nbd.Client by handles (several chunks in flight), and a server
// error in one chunk fails the transfer with the chunks before it moved.
func TestEngineNBDClient(t *testing.T) {
	const n = 64 << 10
	disk := eioDisk{MemDisk: nbd.NewMemDisk(1 << 20), bad: 1<<20 - n + 40*dma.SectorSize}
	// Data everywhere: a server sends a hole without reading it.
	if _, err := disk.MemDisk.WriteAt(bytes.Repeat([]byte{1}, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	srv := nbdtest.Start(t, nbdtest.WithBackend(disk))
	c, err := nbd.Dial(context.Background(), srv.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, err := dma.New(dma.Config{InlineMax: n, FIFOBlocks: 64, ChunkSectors: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	host := make([]byte, n)
	for i := range host {
		host[i] = byte(i * 7)
	}
	want := bytes.Clone(host)
	e.SetRegions(host)
	if err := e.HostToDevice(c, 4096, n); err != nil {
		t.Fatal(err)
	}
	clear(host)
	if err := e.DeviceToHost(c, 4096, n); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(host, want) {
		t.Fatal("read back other bytes than written")
	}
	if tr := e.Last(); !tr.Inline || tr.Bytes != n {
		t.Fatalf("Last() = %+v", tr)
	}
	// Sector 40 of the transfer fails: the 32 sectors of the two chunks
	// before its chunk reach the host.
	err = e.DeviceToHost(c, 1<<20-n, n)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read over the bad sector: %v, want EIO", err)
	}
	if got := e.Last().Bytes; got != 32*dma.SectorSize {
		t.Errorf("%d bytes moved before the failure, want %d", got, 32*dma.SectorSize)
	}
	err = e.HostToDevice(c, 1<<20-n, n)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("write over the bad sector: %v, want EIO", err)
	}
	// The client has no request left in flight: it serves a plain read.
	if _, err := c.ReadAt(host[:4096], 0); err != nil {
		t.Fatal(err)
	}
}
