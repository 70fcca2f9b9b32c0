package nbd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
	"pgregory.net/rapid"
)

// handleDial starts an in-process server with opts and dials it with
// copts.
func handleDial(t testing.TB, opts []nbdtest.Option, copts ...nbd.Option) (*nbdtest.Server, *nbd.Client) {
	t.Helper()
	srv := nbdtest.Start(t, opts...)
	c, err := nbd.Dial(context.Background(), srv.URI, copts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return srv, c
}

func fill(p []byte, seed byte) []byte {
	for i := range p {
		p[i] = seed + byte(i*13)
	}
	return p
}

// TestHandleRoundTrip writes chunks with StartWriteAt, reads them back
// with StartReadAt, and waits for each set in an order other than the
// one they were started in, over one and two connections.
func TestHandleRoundTrip(t *testing.T) {
	const chunk, n = 4096, 8
	orders := map[string][]int{
		"in order": {0, 1, 2, 3, 4, 5, 6, 7},
		"reversed": {7, 6, 5, 4, 3, 2, 1, 0},
		"shuffled": {3, 0, 7, 5, 1, 6, 2, 4},
	}
	for _, conns := range []int{1, 2} {
		_, c := handleDial(t, []nbdtest.Option{nbdtest.WithSize(1 << 20)}, nbd.WithConnections(conns))
		if c.Connections() != conns {
			t.Fatalf("%d connections, want %d (a MemDisk is served with CAN_MULTI_CONN)", c.Connections(), conns)
		}
		for name, order := range orders {
			t.Run(fmt.Sprintf("%d conns/%s", conns, name), func(t *testing.T) {
				ctx := context.Background()
				want := fill(make([]byte, chunk*n), byte(len(name)+conns))
				hs := make([]uint64, n)
				for i := range n {
					h, err := c.StartWriteAt(ctx, want[i*chunk:(i+1)*chunk], int64(i*chunk))
					if err != nil {
						t.Fatal(err)
					}
					hs[i] = h
				}
				if err := waitAll(ctx, c, hs, order); err != nil {
					t.Fatalf("writes: %v", err)
				}
				got := make([]byte, chunk*n)
				for i := range n {
					h, err := c.StartReadAt(ctx, got[i*chunk:(i+1)*chunk], int64(i*chunk))
					if err != nil {
						t.Fatal(err)
					}
					hs[i] = h
				}
				if err := waitAll(ctx, c, hs, order); err != nil {
					t.Fatalf("reads: %v", err)
				}
				if !bytes.Equal(got, want) {
					t.Fatal("read back other bytes than written")
				}
			})
		}
	}
}

func waitAll(ctx context.Context, c *nbd.Client, hs []uint64, order []int) error {
	seen := map[uint64]bool{}
	var errs []error
	for _, i := range order {
		if seen[hs[i]] {
			errs = append(errs, fmt.Errorf("handle %#x returned twice", hs[i]))
		}
		seen[hs[i]] = true
		if err := c.Wait(ctx, hs[i]); err != nil {
			errs = append(errs, fmt.Errorf("request %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// TestHandleMisuse: a handle waited for twice, one never returned, and
// handle 0 of an empty request.
func TestHandleMisuse(t *testing.T) {
	_, c := handleDial(t, []nbdtest.Option{nbdtest.WithSize(1 << 20)}, nbd.WithMaxInFlight(4))
	ctx := context.Background()
	buf := make([]byte, 512)
	h, err := c.StartReadAt(ctx, buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h == 0 {
		t.Fatal("a request got handle 0")
	}
	if err := c.Wait(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, h); !errors.Is(err, nbd.ErrHandle) {
		t.Errorf("second Wait: %v, want ErrHandle", err)
	}
	// The slot h named serves a new request: h still names none.
	h2, err := c.StartWriteAt(ctx, buf, 512)
	if err != nil {
		t.Fatal(err)
	}
	if h2 == h {
		t.Fatalf("a new request got the spent handle %#x", h)
	}
	if err := c.Wait(ctx, h); !errors.Is(err, nbd.ErrHandle) {
		t.Errorf("Wait of a spent handle while its slot is busy: %v, want ErrHandle", err)
	}
	if err := c.Wait(ctx, h2); err != nil {
		t.Fatal(err)
	}
	for _, bogus := range []uint64{1, 1 << 32, 1<<32 | 5, 1<<32 | 1<<31, ^uint64(0)} {
		if err := c.Wait(ctx, bogus); !errors.Is(err, nbd.ErrHandle) {
			t.Errorf("Wait(%#x), never returned: %v, want ErrHandle", bogus, err)
		}
	}
	h0, err := c.StartReadAt(ctx, nil, 0)
	if err != nil || h0 != 0 {
		t.Fatalf("empty read: handle %#x, %v", h0, err)
	}
	if err := c.Wait(ctx, 0); err != nil {
		t.Errorf("Wait(0): %v", err)
	}
	// Every slot is free again: four requests start without waiting.
	hs := make([]uint64, 4)
	for i := range hs {
		if hs[i], err = c.StartReadAt(ctx, buf, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitAll(ctx, c, hs, []int{2, 0, 3, 1}); err != nil {
		t.Fatal(err)
	}
}

// TestHandleConcurrentWait: goroutines racing to wait for the same handle:
// exactly one gets the request's result, the others ErrHandle, none
// blocks.
func TestHandleConcurrentWait(t *testing.T) {
	_, c := handleDial(t, []nbdtest.Option{nbdtest.WithSize(1 << 20)})
	ctx := context.Background()
	buf := make([]byte, 4096)
	for range 50 {
		h, err := c.StartReadAt(ctx, buf, 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { errs[i] = c.Wait(ctx, h) })
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, nbd.ErrHandle):
				t.Fatalf("Wait: %v", err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d Waits of one handle succeeded, want 1", ok)
		}
	}
}

// failingDisk fails reads and writes that touch sector bad with EIO.
type failingDisk struct {
	*nbd.MemDisk
	bad int64
}

func (d failingDisk) hits(p []byte, off int64) bool {
	return off <= d.bad*512 && d.bad*512 < off+int64(len(p))
}

func (d failingDisk) ReadAt(p []byte, off int64) (int, error) {
	if d.hits(p, off) {
		return 0, syscall.EIO
	}
	return d.MemDisk.ReadAt(p, off)
}

func (d failingDisk) WriteAt(p []byte, off int64) (int, error) {
	if d.hits(p, off) {
		return 0, syscall.EIO
	}
	return d.MemDisk.WriteAt(p, off)
}

// TestHandleServerError: a server's read or write error reaches the Wait
// of that request only (the failed read's buffer zeroed), not its
// neighbours'.
func TestHandleServerError(t *testing.T) {
	disk := failingDisk{MemDisk: nbd.NewMemDisk(1 << 20), bad: 10}
	if _, err := disk.MemDisk.WriteAt(fill(make([]byte, 1<<20), 1), 0); err != nil {
		t.Fatal(err)
	}
	_, c := handleDial(t, []nbdtest.Option{nbdtest.WithBackend(disk)})
	ctx := context.Background()
	for _, write := range []bool{false, true} {
		bufs := [3][]byte{fill(make([]byte, 4096), 9), fill(make([]byte, 4096), 9), fill(make([]byte, 4096), 9)}
		var hs [3]uint64
		for i := range bufs {
			off := int64(i) * 4096 // the middle one holds sector 10
			var err error
			if write {
				hs[i], err = c.StartWriteAt(ctx, bufs[i], off)
			} else {
				hs[i], err = c.StartReadAt(ctx, bufs[i], off)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, i := range []int{2, 1, 0} {
			err := c.Wait(ctx, hs[i])
			if i == 1 {
				if !errors.Is(err, syscall.EIO) {
					t.Errorf("write=%v: Wait of the failing request: %v, want EIO", write, err)
				}
				if !write && !bytes.Equal(bufs[i], make([]byte, 4096)) {
					t.Errorf("the failed read's buffer is not zeroed")
				}
				continue
			}
			if err != nil {
				t.Errorf("write=%v: Wait of request %d: %v", write, i, err)
			}
		}
	}
}

// TestHandleCancel: a Wait whose ctx has ended returns ctx's error, spends
// the handle, and leaves the client usable.
func TestHandleCancel(t *testing.T) {
	_, c := handleDial(t, []nbdtest.Option{nbdtest.WithSize(1 << 20)}, nbd.WithMaxInFlight(2))
	ctx := context.Background()
	buf := make([]byte, 4096)
	for range 20 {
		h, err := c.StartReadAt(ctx, buf, 0)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		// The reply may already be in: either result is right.
		if err := c.Wait(cctx, h); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait with an ended ctx: %v", err)
		}
		if err := c.Wait(ctx, h); !errors.Is(err, nbd.ErrHandle) {
			t.Fatalf("Wait after the cancelled one: %v, want ErrHandle", err)
		}
	}
	// Both slots come back once the abandoned replies are read.
	for range 2 {
		h, err := c.StartReadAt(ctx, buf, 0)
		if err == nil {
			err = c.Wait(ctx, h)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestHandleStateMachine runs random starts and waits (of live handles in
// any order, of spent ones, of handles never returned) against a model:
// the set of live handles and the bytes of the disk.
func TestHandleStateMachine(t *testing.T) {
	const size, sector = 64 << 10, 512
	srv, c := handleDial(t, []nbdtest.Option{nbdtest.WithSize(size)}, nbd.WithMaxInFlight(6))
	ctx := context.Background()
	type req struct {
		write bool
		off   int64
		buf   []byte
	}
	rapid.Check(t, func(rt *rapid.T) {
		model := make([]byte, size)
		if _, err := srv.Disk.WriteAt(model, 0); err != nil {
			rt.Fatal(err)
		}
		live := map[uint64]*req{}
		var spent []uint64
		wait := func(rt *rapid.T, h uint64) {
			r := live[h]
			delete(live, h)
			spent = append(spent, h)
			if err := c.Wait(ctx, h); err != nil {
				rt.Fatalf("Wait(%#x): %v", h, err)
			}
			if !r.write && !bytes.Equal(r.buf, model[r.off:r.off+int64(len(r.buf))]) {
				rt.Fatalf("read of %d+%d: other bytes than the model's", r.off, len(r.buf))
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"start": func(rt *rapid.T) {
				if len(live) == 6 {
					rt.Skip("every slot in flight")
				}
				write := rapid.Bool().Draw(rt, "write")
				off := rapid.Int64Range(0, size/sector-1).Draw(rt, "sector") * sector
				n := rapid.Int64Range(1, min(16, (size-off)/sector)).Draw(rt, "sectors") * sector
				for _, r := range live {
					if r.off < off+n && off < r.off+int64(len(r.buf)) && (write || r.write) {
						rt.Skip("would race a request in flight")
					}
				}
				r := &req{write: write, off: off, buf: make([]byte, n)}
				var h uint64
				var err error
				if write {
					copy(model[off:], fill(r.buf, rapid.Byte().Draw(rt, "seed")))
					h, err = c.StartWriteAt(ctx, r.buf, off)
				} else {
					h, err = c.StartReadAt(ctx, r.buf, off)
				}
				if err != nil {
					rt.Fatal(err)
				}
				if _, dup := live[h]; dup || h == 0 {
					rt.Fatalf("handle %#x is 0 or live already", h)
				}
				live[h] = r
			},
			"waitLive": func(rt *rapid.T) {
				if len(live) == 0 {
					rt.Skip("nothing in flight")
				}
				hs := make([]uint64, 0, len(live))
				for h := range live {
					hs = append(hs, h)
				}
				slices.Sort(hs)
				wait(rt, rapid.SampledFrom(hs).Draw(rt, "handle"))
			},
			"waitSpent": func(rt *rapid.T) {
				if len(spent) == 0 {
					rt.Skip("nothing waited for yet")
				}
				h := rapid.SampledFrom(spent).Draw(rt, "handle")
				if _, ok := live[h]; ok {
					rt.Skip("handed out again") // never happens at this scale
				}
				if err := c.Wait(ctx, h); !errors.Is(err, nbd.ErrHandle) {
					rt.Fatalf("Wait of spent %#x: %v, want ErrHandle", h, err)
				}
			},
			"waitUnknown": func(rt *rapid.T) {
				// Beyond every slot, or a generation far ahead.
				h := rapid.SampledFrom([]uint64{1<<32 | 7, 1<<32 | 1<<20, 0xfffffff0<<32 | 1}).Draw(rt, "handle")
				if err := c.Wait(ctx, h); !errors.Is(err, nbd.ErrHandle) {
					rt.Fatalf("Wait of unknown %#x: %v, want ErrHandle", h, err)
				}
			},
		})
		for len(live) > 0 {
			for h := range live {
				wait(rt, h)
				break
			}
		}
		got := make([]byte, size)
		if _, err := c.ReadAt(got, 0); err != nil {
			rt.Fatal(err)
		}
		if !bytes.Equal(got, model) {
			rt.Fatal("the disk differs from the model")
		}
	})
}

// BenchmarkHandle keeps four 16 KiB reads (or writes) in flight through
// handles, waited for out of order, as an engine reading ahead does; it
// reports allocations per round (0 expected: server included, it runs in
// this process).
func BenchmarkHandle(b *testing.B) {
	for _, write := range []bool{false, true} {
		b.Run(map[bool]string{false: "read", true: "write"}[write], func(b *testing.B) {
			_, c := handleDial(b, []nbdtest.Option{nbdtest.WithSize(1 << 20)})
			ctx := context.Background()
			buf := make([]byte, 64<<10)
			var hs [4]uint64
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				for i := range hs {
					p := buf[i*16<<10 : (i+1)*16<<10]
					var err error
					if write {
						hs[i], err = c.StartWriteAt(ctx, p, int64(i*16<<10))
					} else {
						hs[i], err = c.StartReadAt(ctx, p, int64(i*16<<10))
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				for _, i := range [4]int{1, 0, 3, 2} {
					if err := c.Wait(ctx, hs[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
