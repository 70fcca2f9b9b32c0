package nbd_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

// bigRangeRecorder records the ranges of the TRIM, WRITE_ZEROES and CACHE
// requests the server passes on, and fails the call that covers failAt.
type bigRangeRecorder struct {
	*nbd.MemDisk
	mu     sync.Mutex
	calls  map[string][][2]int64
	failAt int64
}

func (r *bigRangeRecorder) record(op string, off, n int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[op] = append(r.calls[op], [2]int64{off, n})
	if off <= r.failAt && r.failAt < off+n {
		return syscall.EIO
	}
	return nil
}

func (r *bigRangeRecorder) Trim(ctx context.Context, off, n int64) error {
	if err := r.record("trim", off, n); err != nil {
		return err
	}
	return r.MemDisk.Trim(ctx, off, n)
}

func (r *bigRangeRecorder) WriteZeroes(ctx context.Context, off, n int64, f nbd.CmdFlags) error {
	if err := r.record("zeroes", off, n); err != nil {
		return err
	}
	return r.MemDisk.WriteZeroes(ctx, off, n, f)
}

func (r *bigRangeRecorder) Cache(ctx context.Context, off, n int64) error {
	return r.record("cache", off, n)
}

// bigRangeParts is [off, off+n) in parts of step, in order.
func bigRangeParts(off, n, step int64) [][2]int64 {
	var out [][2]int64
	for n > 0 {
		k := min(n, step)
		out = append(out, [2]int64{off, k})
		off += k
		n -= k
	}
	return out
}

// TestClientRangesOver4GiB: TRIM, WRITE_ZEROES and CACHE carry a 32-bit
// length on the wire; the client splits longer ranges into requests of at
// most 1 GiB (CACHE: of its maximum payload), sent in order, and stops at
// the first that fails.
func TestClientRangesOver4GiB(t *testing.T) {
	const size = 8 << 30
	const off, n = 1<<30 + 4096, 5<<30 + 8192 // over 4 GiB, not a multiple of 1 GiB
	ctx := context.Background()
	rec := &bigRangeRecorder{MemDisk: nbd.NewMemDisk(size), calls: map[string][][2]int64{}, failAt: -1}
	srv := nbdtest.Start(t, nbdtest.WithBackend(rec), nbdtest.WithServer(func(s *nbd.Server) { s.MaxPayload = 16 << 20 }))
	c, err := nbd.Dial(ctx, srv.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	marks := []int64{off - 1, off, 3 << 30, off + n - 1, off + n}
	for _, m := range marks {
		if _, err := c.WriteAt([]byte{0xee}, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WriteZeroes(ctx, off, n, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Trim(ctx, off, n); err != nil {
		t.Fatal(err)
	}
	if err := c.Cache(ctx, off, n); err != nil {
		t.Fatal(err)
	}
	want := map[string][][2]int64{
		"zeroes": bigRangeParts(off, n, 1<<30),
		"trim":   bigRangeParts(off, n, 1<<30),
		"cache":  bigRangeParts(off, n, 16<<20),
	}
	rec.mu.Lock()
	got := rec.calls
	rec.mu.Unlock()
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("requests the server passed on (-want +got):\n%s", d)
	}
	for i, m := range marks {
		b := make([]byte, 1)
		if _, err := c.ReadAt(b, m); err != nil {
			t.Fatal(err)
		}
		inside := m >= off && m < off+n
		if wantB := map[bool]byte{true: 0, false: 0xee}[inside]; b[0] != wantB {
			t.Errorf("mark %d at %d reads %#x, want %#x", i, m, b[0], wantB)
		}
	}

	// A part that fails ends the call: the parts after it are not sent.
	rec.mu.Lock()
	rec.calls = map[string][][2]int64{}
	rec.failAt = off + 2<<30 + 5
	rec.mu.Unlock()
	err = c.WriteZeroes(ctx, off, n, 0)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("WriteZeroes with its third part failing: %v, want EIO", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if d := cmp.Diff(bigRangeParts(off, n, 1<<30)[:3], rec.calls["zeroes"]); d != "" {
		t.Errorf("parts sent (-want +got):\n%s", d)
	}
}
