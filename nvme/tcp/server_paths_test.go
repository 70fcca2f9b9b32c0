package tcp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// countingDisk is a MemDisk that counts its loans and the pages it takes.
type countingDisk struct {
	*nbd.MemDisk
	lends, givebacks, pages atomic.Int64
}

func (d *countingDisk) Lend(off, n int64, p []nbd.LentPiece) []nbd.LentPiece {
	d.lends.Add(1)
	return d.MemDisk.Lend(off, n, p)
}

func (d *countingDisk) GiveBack(off, n int64) {
	d.givebacks.Add(1)
	d.MemDisk.GiveBack(off, n)
}

func (d *countingDisk) TakePage(p *[nbd.PageSize]byte, off int64) (*[nbd.PageSize]byte, bool) {
	d.pages.Add(1)
	return d.MemDisk.TakePage(p, off)
}

// copyingDisk hides a MemDisk's Lend, GiveBack and TakePage (the fields
// shadow the promoted methods): the target copies through ReadAt and
// WriteAt. With a delay, every ReadAt and WriteAt sleeps (with jitter,
// a random part of it, so that calls finish out of order), and the most
// calls in progress at once are recorded.
type copyingDisk struct {
	*nbd.MemDisk
	Lend, GiveBack, TakePage struct{}
	delay                    time.Duration
	jitter                   bool
	cur, peak                atomic.Int32
}

func (d *copyingDisk) enter() func() {
	n := d.cur.Add(1)
	for p := d.peak.Load(); n > p && !d.peak.CompareAndSwap(p, n); p = d.peak.Load() {
	}
	if d.jitter {
		time.Sleep(rand.N(d.delay))
	} else {
		time.Sleep(d.delay)
	}
	return func() { d.cur.Add(-1) }
}

func (d *copyingDisk) ReadAt(p []byte, off int64) (int, error) {
	if d.delay > 0 {
		defer d.enter()()
	}
	return d.MemDisk.ReadAt(p, off)
}

func (d *copyingDisk) WriteAt(p []byte, off int64) (int, error) {
	if d.delay > 0 {
		defer d.enter()()
	}
	return d.MemDisk.WriteAt(p, off)
}

// exercise writes whole pages, odd sizes and offsets from many goroutines
// at once on h, each to its own range, then reads everything back (holes
// included) at once, and checks it, and the backend, against a model.
func exercise(t *testing.T, h *Host, disk nbd.Backend, size int) {
	t.Helper()
	model := make([]byte, size)
	const workers = 8
	part := size / workers
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 3))
			base := g * part
			for k := range 12 {
				n, off := nbd.PageSize, base+(k%(part/nbd.PageSize))*nbd.PageSize // whole, aligned pages
				if k%3 == 2 {
					n, off = 512*(1+r.IntN(200)), base+512*r.IntN(part/512-201)
				}
				buf := make([]byte, n)
				for i := range buf {
					buf[i] = byte(r.Uint32())
				}
				if _, err := h.WriteAt(buf, int64(off)); err != nil {
					t.Errorf("write %d at %d: %v", n, off, err)
					return
				}
				copy(model[off:], buf)
			}
		})
	}
	wg.Wait()
	for g := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 4))
			for range 30 {
				n := 512 * (1 + r.IntN(256))
				off := 512 * r.IntN((size-n)/512)
				buf := make([]byte, n)
				if _, err := h.ReadAt(buf, int64(off)); err != nil {
					t.Errorf("read %d at %d: %v", n, off, err)
					return
				}
				if !bytes.Equal(buf, model[off:off+n]) {
					t.Errorf("read %d at %d differs from what was written", n, off)
					return
				}
			}
		})
	}
	wg.Wait()
	got := make([]byte, size)
	if _, err := disk.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("backend differs from the model (%v)", err)
	}
}

// Reads from a Lender go out from its memory and every loan ends; whole
// pages go to a PageTaker; a backend that is neither is read and written
// by copying. Each with digests off and on, the data checked both ways.
func TestServerBackendPaths(t *testing.T) {
	const size = 4 << 20
	for _, dg := range []bool{false, true} {
		t.Run(fmt.Sprintf("lender, digests %v", dg), func(t *testing.T) {
			disk := &countingDisk{MemDisk: nbd.NewMemDisk(size)}
			_, addr := startServer(t, disk, 512)
			h := dialTest(t, addr, &Config{IOQueues: 2, QueueDepth: 16, HeaderDigest: dg, DataDigest: dg})
			exercise(t, h, disk, size)
			h.Close()
			if disk.lends.Load() == 0 || disk.pages.Load() == 0 {
				t.Errorf("%d loans, %d pages taken", disk.lends.Load(), disk.pages.Load())
			}
			// Every loan ends once its completion is written (or the
			// connection ends).
			deadline := time.Now().Add(5 * time.Second)
			for disk.lends.Load() != disk.givebacks.Load() && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if l, g := disk.lends.Load(), disk.givebacks.Load(); l != g {
				t.Errorf("%d loans, %d given back", l, g)
			}
		})
		t.Run(fmt.Sprintf("copying, digests %v", dg), func(t *testing.T) {
			disk := &copyingDisk{MemDisk: nbd.NewMemDisk(size)}
			_, addr := startServer(t, disk, 512)
			h := dialTest(t, addr, &Config{IOQueues: 2, QueueDepth: 16, HeaderDigest: dg, DataDigest: dg})
			exercise(t, h, disk, size)
		})
	}
}

// Server.QueueWorkers bounds the commands of one queue that a slow
// backend, one that cannot keep requests in flight, runs at once: 0 (the
// default) and 1 keep the queue to its reader and one worker (one backend
// call at a time), 3 to at most three, every byte right.
func TestServerQueueWorkers(t *testing.T) {
	for _, workers := range []int{0, 1, 3} {
		t.Run(fmt.Sprint(workers), func(t *testing.T) {
			const size = 4 << 20
			disk := &copyingDisk{MemDisk: nbd.NewMemDisk(size), delay: time.Millisecond}
			_, addr := startServer(t, disk, 512, func(s *Server) { s.QueueWorkers = workers })
			h := dialTest(t, addr, &Config{IOQueues: 1, QueueDepth: 16})
			exercise(t, h, disk, size)
			if p := disk.peak.Load(); p > int32(max(workers, 1)) || (workers > 1 && p < 2) {
				t.Fatalf("at most %d backend calls at once on one queue with QueueWorkers %d", p, workers)
			}
		})
	}
}
