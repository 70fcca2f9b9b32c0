package bridge

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

// badDisk is a memory disk with one bad sector: every read or write that
// touches it fails with EIO. It wraps the disk rather than embedding it, so
// that no optional method of the memory disk reaches past the failure.
type badDisk struct {
	d   *nbd.MemDisk
	bad atomic.Int64 // byte offset of the bad sector, -1 for none
	// partial makes a call that meets the bad sector move the sectors
	// before it first, as a file's would, and count them.
	partial bool
}

func newBadDisk(size int64) *badDisk {
	b := &badDisk{d: nbd.NewMemDisk(size)}
	b.bad.Store(-1)
	return b
}

func (b *badDisk) hit(n int, off int64) bool {
	s := b.bad.Load()
	return s >= 0 && off < s+512 && s < off+int64(n)
}

func (b *badDisk) ReadAt(p []byte, off int64) (int, error) {
	if b.hit(len(p), off) {
		return b.before(b.d.ReadAt, p, off)
	}
	return b.d.ReadAt(p, off)
}

func (b *badDisk) WriteAt(p []byte, off int64) (int, error) {
	if b.hit(len(p), off) {
		return b.before(b.d.WriteAt, p, off)
	}
	return b.d.WriteAt(p, off)
}

// before fails a call that meets the bad sector with EIO, after moving
// the sectors before it when partial.
func (b *badDisk) before(rw func([]byte, int64) (int, error), p []byte, off int64) (int, error) {
	if s := b.bad.Load(); b.partial && s > off {
		n, _ := rw(p[:s-off], off)
		return n, syscall.EIO
	}
	return 0, syscall.EIO
}

func (b *badDisk) Size() int64                     { return b.d.Size() }
func (b *badDisk) Flush(ctx context.Context) error { return nil }

// serve serves be over an in-process NBD server and returns a client,
// closed when the test ends.
func serve(t testing.TB, be nbd.Backend) *nbd.Client {
	t.Helper()
	srv := nbdtest.Start(t, nbdtest.WithBackend(be))
	c, err := nbd.Dial(context.Background(), srv.URI)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fill writes a pattern unique to (off, gen) into p.
func fill(p []byte, off int64, gen byte) {
	for i := range p {
		p[i] = byte(int64(i)+off>>9) ^ gen*37
	}
}
