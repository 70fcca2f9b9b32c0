package tcp

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// nbdBridge serves disk with an in-process nbd.Server and returns an
// nbd.Client of it: the backend of an NVMe-to-NBD target.
func nbdBridge(t testing.TB, disk nbd.Backend, opts ...nbd.Option) *nbd.Client {
	t.Helper()
	srv := &nbd.Server{Exports: []nbd.Export{{Name: "disk", Backend: disk}}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	c, err := nbd.Dial(context.Background(), "nbd://"+l.Addr().String()+"/disk", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// queueGoroutines samples every goroutine's stack until stop closes and
// sends the most goroutines seen at once in the target's workers.
func queueGoroutines(stop <-chan struct{}) <-chan int {
	out := make(chan int, 1)
	go func() {
		peak := 0
		buf := make([]byte, 1<<20)
		for {
			n := runtime.Stack(buf, true)
			peak = max(peak, strings.Count(string(buf[:n]), "tcp.(*conn).worker("))
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	return out
}

// A namespace on an NBD client (nvme.AsyncReaderAt and AsyncWriterAt)
// keeps a queue's reads and writes in flight with the queue's reader
// starting them and one worker finishing them, the goroutine pair of the
// default QueueWorkers: the NBD server's slow disk serves several at once,
// and every byte is right. With QueueWorkers 3, three workers wait for
// the started requests at once, each gathering its own completions; with
// jitter, the disk's calls take random times, so the requests finish in
// any order, and whichever worker waits longest still writes what it
// held back.
func TestServerAsyncBackend(t *testing.T) {
	for _, tc := range []struct {
		workers int
		jitter  bool
	}{{0, false}, {3, false}, {3, true}} {
		workers := tc.workers
		name := fmt.Sprint("QueueWorkers ", workers)
		if tc.jitter {
			name += " jitter"
		}
		t.Run(name, func(t *testing.T) {
			const size = 4 << 20
			disk := &copyingDisk{MemDisk: nbd.NewMemDisk(size), delay: time.Millisecond, jitter: tc.jitter}
			_, addr := startServer(t, nbdBridge(t, disk), 512, func(s *Server) { s.QueueWorkers = workers })
			h := dialTest(t, addr, &Config{IOQueues: 1, QueueDepth: 16})
			stop := make(chan struct{})
			seen := queueGoroutines(stop)
			exercise(t, h, disk, size)
			close(stop)
			if w := <-seen; w > max(workers, 1) {
				t.Errorf("%d workers at once on one queue, want at most %d", w, max(workers, 1))
			}
			if p := disk.peak.Load(); p < 2 {
				t.Errorf("at most %d requests at once on the NBD server's disk, want several", p)
			}
		})
	}
}

// Flush, FUA writes and Write Zeroes on such a namespace need a request
// slot of the NBD client too; with the slots all taken by reads and
// writes the queue's worker has still to finish, they run where they do
// not wait for it, and nothing deadlocks.
func TestServerAsyncBackendSlots(t *testing.T) {
	const size = 1 << 20
	disk := &copyingDisk{MemDisk: nbd.NewMemDisk(size), delay: 200 * time.Microsecond}
	_, addr := startServer(t, nbdBridge(t, disk, nbd.WithMaxInFlight(2)), 512)
	h := dialTest(t, addr, &Config{IOQueues: 1, QueueDepth: 16})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer func() {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("the queue's commands never completed: deadlock")
		}
	}()
	for g := range 8 {
		wg.Go(func() {
			off := int64(g) * 65536
			data := bytes.Repeat([]byte{byte(g + 1)}, 8192)
			got := make([]byte, len(data))
			for k := range 20 {
				var err error
				switch k % 5 {
				case 0:
					_, err = h.WriteAt(data, off)
				case 1:
					_, err = h.WriteAtFUA(data, off+8192)
				case 2:
					err = h.Flush(ctx)
				case 3:
					err = h.WriteZeroes(ctx, off+16384, 4096, 0)
				case 4:
					if _, err = h.ReadAt(got, off); err == nil && !bytes.Equal(got, data) {
						t.Errorf("goroutine %d: read back other data", g)
					}
				}
				if err != nil {
					t.Errorf("goroutine %d, step %d: %v", g, k, err)
					return
				}
				if ctx.Err() != nil {
					t.Errorf("goroutine %d: stuck", g)
					return
				}
			}
		})
	}
}

// slowZeroDisk is a copyingDisk (read through ReadAt) whose reads at
// offset 0 take a while.
type slowZeroDisk struct{ copyingDisk }

func (d *slowZeroDisk) ReadAt(p []byte, off int64) (int, error) {
	if off == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	return d.copyingDisk.ReadAt(p, off)
}

// With several workers on a queue, a completion held back to leave with
// those of the commands queued behind it is written even when other
// workers take those commands and finish them first: every read of a
// burst whose slowest command is anywhere in it completes.
func TestServerAsyncBackendGather(t *testing.T) {
	const size = 1 << 20
	disk := &slowZeroDisk{copyingDisk{MemDisk: nbd.NewMemDisk(size)}}
	_, addr := startServer(t, nbdBridge(t, disk), 512, func(s *Server) { s.QueueWorkers = 3 })
	h := dialTest(t, addr, &Config{IOQueues: 1, QueueDepth: 16})
	for round := range 100 {
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				buf := make([]byte, 4096)
				if _, err := h.ReadAt(buf, int64(g*8192)); err != nil {
					t.Errorf("round %d, read at %d: %v", round, g*8192, err)
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a read's completion was never sent", round)
		}
	}
}
