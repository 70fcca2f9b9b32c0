package nbd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
	"pgregory.net/rapid"
)

const copyTestSize = 4 << 20

// copyTestFill writes random data into about half the 64 KiB chunks of b
// (seeded) and returns the bytes written in all.
func copyTestFill(t testing.TB, b nbd.Backend, seed uint64) int64 {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	chunk := make([]byte, nbd.MemDiskChunkSize)
	var n int64
	for off := int64(0); off+nbd.MemDiskChunkSize <= b.Size(); off += nbd.MemDiskChunkSize {
		if r.IntN(2) == 0 {
			continue
		}
		for i := range chunk {
			chunk[i] = byte(r.Uint32())
		}
		if _, err := b.WriteAt(chunk, off); err != nil {
			t.Fatal(err)
		}
		n += nbd.MemDiskChunkSize
	}
	return n
}

// copyTB is what the helpers need of a *testing.T or a *rapid.T.
type copyTB interface {
	Helper()
	Fatal(args ...any)
}

func copyTestRead(t copyTB, b nbd.Backend) []byte {
	t.Helper()
	p := make([]byte, b.Size())
	if _, err := b.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	return p
}

func copyTestSame(t copyTB, dst, src nbd.Backend) {
	t.Helper()
	if !bytes.Equal(copyTestRead(t, dst)[:src.Size()], copyTestRead(t, src)) {
		t.Fatal("destination differs from the source")
	}
}

func TestCopyMemoryHoles(t *testing.T) {
	ctx := context.Background()
	src := nbd.NewMemDisk(copyTestSize)
	data := copyTestFill(t, src, 1)
	if data == 0 || data == copyTestSize {
		t.Fatal("the source has no holes, or nothing but holes")
	}
	t.Run("destination is zero", func(t *testing.T) {
		dst := nbd.NewMemDisk(copyTestSize)
		st, err := nbd.Copy(ctx, dst, src, nbd.CopyOptions{DestinationIsZero: true, RequestSize: 100 << 10})
		if err != nil {
			t.Fatal(err)
		}
		copyTestSame(t, dst, src)
		want := nbd.CopyStats{Size: copyTestSize, Done: copyTestSize, Data: data, Skipped: copyTestSize - data}
		if st != want {
			t.Errorf("stats %+v, want %+v", st, want)
		}
		if dst.Allocated() != src.Allocated() {
			t.Errorf("destination allocated %d bytes, the source %d", dst.Allocated(), src.Allocated())
		}
	})
	t.Run("destination dirty", func(t *testing.T) {
		dst := nbd.NewMemDisk(copyTestSize + 5)
		if _, err := dst.WriteAt(bytes.Repeat([]byte{0xff}, copyTestSize+5), 0); err != nil {
			t.Fatal(err)
		}
		st, err := nbd.Copy(ctx, dst, src, nbd.CopyOptions{Requests: 3})
		if err != nil {
			t.Fatal(err)
		}
		copyTestSame(t, dst, src)
		want := nbd.CopyStats{Size: copyTestSize, Done: copyTestSize, Data: data, Zeroed: copyTestSize - data}
		if st != want {
			t.Errorf("stats %+v, want %+v", st, want)
		}
		// WriteZeroes freed the chunks of the holes (one more: the 5
		// bytes past the copy).
		if dst.Allocated() != src.Allocated()+nbd.MemDiskChunkSize {
			t.Errorf("destination allocated %d bytes, the source %d", dst.Allocated(), src.Allocated())
		}
	})
	t.Run("no extents", func(t *testing.T) {
		dst := nbd.NewMemDisk(copyTestSize)
		st, err := nbd.Copy(ctx, dst, src, nbd.CopyOptions{NoExtents: true, DestinationIsZero: true})
		if err != nil {
			t.Fatal(err)
		}
		copyTestSame(t, dst, src)
		if st.Data != copyTestSize {
			t.Errorf("copied %d bytes as data, want all %d", st.Data, copyTestSize)
		}
	})
}

// TestCopyClients copies between two clients of in-process servers, with
// two connections each (the servers allow multi-conn).
func TestCopyClients(t *testing.T) {
	ctx := context.Background()
	a, b := nbdtest.Start(t, nbdtest.WithSize(copyTestSize)), nbdtest.Start(t, nbdtest.WithSize(copyTestSize))
	data := copyTestFill(t, a.Disk, 2)
	src, err := nbd.Dial(ctx, a.URI, nbd.WithConnections(2))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := nbd.Dial(ctx, b.URI, nbd.WithConnections(2))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if src.Connections() != 2 || dst.Connections() != 2 {
		t.Fatalf("connections %d and %d, want 2 each", src.Connections(), dst.Connections())
	}
	var last nbd.CopyStats
	calls := 0
	st, err := nbd.Copy(ctx, dst, src, nbd.CopyOptions{DestinationIsZero: true, Flush: true, Progress: func(s nbd.CopyStats) {
		if s.Done < last.Done {
			t.Errorf("progress went back from %d to %d", last.Done, s.Done)
		}
		last = s
		calls++
	}})
	if err != nil {
		t.Fatal(err)
	}
	copyTestSame(t, b.Disk, a.Disk)
	if st.Data != data || last != st || calls == 0 {
		t.Errorf("stats %+v (data %d), last progress %+v after %d calls", st, data, last, calls)
	}
	if b.Disk.Allocated() != a.Disk.Allocated() {
		t.Errorf("destination allocated %d bytes, the source %d", b.Disk.Allocated(), a.Disk.Allocated())
	}
}

// copyFaulty fails the reads, writes or zeroing that touch offset bad.
type copyFaulty struct {
	*nbd.MemDisk
	op  string
	bad int64
	err error
}

func (f *copyFaulty) hit(op string, off, n int64) bool {
	return op == f.op && off <= f.bad && f.bad < off+n
}

func (f *copyFaulty) ReadAt(p []byte, off int64) (int, error) {
	if f.hit("read", off, int64(len(p))) {
		return 0, f.err
	}
	return f.MemDisk.ReadAt(p, off)
}

func (f *copyFaulty) WriteAt(p []byte, off int64) (int, error) {
	if f.hit("write", off, int64(len(p))) {
		return 0, f.err
	}
	return f.MemDisk.WriteAt(p, off)
}

func (f *copyFaulty) WriteZeroes(ctx context.Context, off, n int64, flags nbd.CmdFlags) error {
	if f.hit("write zeroes", off, n) {
		return f.err
	}
	return f.MemDisk.WriteZeroes(ctx, off, n, flags)
}

func TestCopyErrors(t *testing.T) {
	ctx := context.Background()
	full := nbd.NewMemDisk(copyTestSize)
	if _, err := full.WriteAt(bytes.Repeat([]byte{1}, copyTestSize), 0); err != nil {
		t.Fatal(err)
	}
	empty := nbd.NewMemDisk(copyTestSize)
	const bad = 1<<20 + 5
	for _, tc := range []struct {
		op      string
		src     nbd.Backend
		faultIn string // "src" or "dst"
		want    nbd.CopyError
	}{
		{"read", full, "src", nbd.CopyError{Op: "read", Offset: 1 << 20, Length: 64 << 10}},
		{"write", full, "dst", nbd.CopyError{Op: "write", Offset: 1 << 20, Length: 64 << 10}},
		{"write zeroes", empty, "dst", nbd.CopyError{Op: "write zeroes", Offset: 0, Length: copyTestSize}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			src, dst := tc.src, nbd.Backend(nbd.NewMemDisk(copyTestSize))
			f := &copyFaulty{op: tc.op, bad: bad, err: syscall.EIO}
			if tc.faultIn == "src" {
				f.MemDisk, src = tc.src.(*nbd.MemDisk), f
			} else {
				f.MemDisk, dst = dst.(*nbd.MemDisk), f
			}
			st, err := nbd.Copy(ctx, dst, src, nbd.CopyOptions{RequestSize: 64 << 10, Requests: 4})
			ce, ok := errors.AsType[*nbd.CopyError](err)
			if !ok || !errors.Is(err, syscall.EIO) {
				t.Fatalf("error %v, want a *CopyError with EIO", err)
			}
			if ce.Op != tc.want.Op || ce.Offset != tc.want.Offset || ce.Length != tc.want.Length {
				t.Errorf("error %v, want %s of %d at %d", err, tc.want.Op, tc.want.Length, tc.want.Offset)
			}
			if st.Done >= copyTestSize {
				t.Errorf("stats %+v after a failure: all done", st)
			}
		})
	}
	t.Run("ENOTSUP zeroes fall back to writes", func(t *testing.T) {
		dst := &copyFaulty{MemDisk: nbd.NewMemDisk(copyTestSize), op: "write zeroes", bad: 0, err: fmt.Errorf("no: %w", syscall.ENOTSUP)}
		if _, err := dst.MemDisk.WriteAt(bytes.Repeat([]byte{9}, copyTestSize), 0); err != nil {
			t.Fatal(err)
		}
		st, err := nbd.Copy(ctx, dst, empty, nbd.CopyOptions{})
		if err != nil || st.Zeroed != copyTestSize {
			t.Fatalf("copy: %+v, %v", st, err)
		}
		copyTestSame(t, dst, empty)
	})
	t.Run("destination too small", func(t *testing.T) {
		_, err := nbd.Copy(ctx, nbd.NewMemDisk(copyTestSize-1), empty, nbd.CopyOptions{})
		if !errors.Is(err, nbd.ErrCopySize) {
			t.Fatalf("error %v, want ErrCopySize", err)
		}
	})
}

// copyStuck is a source whose reads wait for their context... which a
// plain ReaderAt does not have: they wait until released.
type copyStuck struct {
	*nbd.MemDisk
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *copyStuck) ReadAt(p []byte, off int64) (int, error) {
	s.once.Do(func() { close(s.started) })
	<-s.release
	return s.MemDisk.ReadAt(p, off)
}

// TestCopyCancel cancels a copy whose reads hang: Copy returns the
// context's error once the reads in flight end, and starts no more.
func TestCopyCancel(t *testing.T) {
	src := &copyStuck{MemDisk: nbd.NewMemDisk(copyTestSize), started: make(chan struct{}), release: make(chan struct{})}
	if _, err := src.MemDisk.WriteAt(bytes.Repeat([]byte{1}, copyTestSize), 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var st nbd.CopyStats
	go func() {
		var err error
		st, err = nbd.Copy(ctx, nbd.NewMemDisk(copyTestSize), src, nbd.CopyOptions{RequestSize: 64 << 10, Requests: 2})
		done <- err
	}()
	<-src.started
	cancel()
	time.Sleep(10 * time.Millisecond)
	close(src.release)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
		if st.Data > 4*64<<10 {
			t.Errorf("%d bytes copied after the cancel: more than the requests in flight", st.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Copy did not return after its context ended")
	}
}

// TestCopyRapid: random data and holes, random request sizes and counts,
// a dirty or a zero destination: the copy reads back equal, and the
// stats add up.
func TestCopyRapid(t *testing.T) {
	ctx := context.Background()
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.Int64Range(1, 1<<20).Draw(t, "size")
		src := nbd.NewMemDisk(size)
		for range rapid.IntRange(0, 12).Draw(t, "writes") {
			off := rapid.Int64Range(0, size-1).Draw(t, "off")
			n := rapid.Int64Range(1, min(size-off, 200<<10)).Draw(t, "n")
			b := bytes.Repeat([]byte{rapid.Byte().Draw(t, "byte")}, int(n))
			if _, err := src.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
			if rapid.Bool().Draw(t, "trim") {
				toff := rapid.Int64Range(0, size-1).Draw(t, "toff")
				if err := src.Trim(ctx, toff, rapid.Int64Range(0, size-toff).Draw(t, "tn")); err != nil {
					t.Fatal(err)
				}
			}
		}
		dst := nbd.NewMemDisk(size + rapid.Int64Range(0, 3).Draw(t, "extra"))
		zero := rapid.Bool().Draw(t, "destinationIsZero")
		if !zero {
			if _, err := dst.WriteAt(bytes.Repeat([]byte{0xee}, int(dst.Size())), 0); err != nil {
				t.Fatal(err)
			}
		}
		opts := nbd.CopyOptions{
			RequestSize:       rapid.IntRange(1, 300<<10).Draw(t, "requestSize"),
			Requests:          rapid.IntRange(1, 8).Draw(t, "requests"),
			DestinationIsZero: zero,
			NoExtents:         rapid.Bool().Draw(t, "noExtents"),
		}
		st, err := nbd.Copy(ctx, dst, src, opts)
		if err != nil {
			t.Fatal(err)
		}
		copyTestSame(t, dst, src)
		if st.Size != size || st.Done != size || st.Data+st.Zeroed+st.Skipped != size {
			t.Fatalf("stats %+v for %d bytes", st, size)
		}
		if zero && st.Zeroed != 0 || !zero && st.Skipped != 0 {
			t.Fatalf("stats %+v with DestinationIsZero %v", st, zero)
		}
	})
}

func ExampleCopy() {
	src := nbd.NewMemDisk(8 << 20)
	if _, err := src.WriteAt(bytes.Repeat([]byte("nhd!"), 1<<18), 2<<20); err != nil {
		log.Fatal(err)
	}
	dst := nbd.NewMemDisk(8 << 20)
	st, err := nbd.Copy(context.Background(), dst, src, nbd.CopyOptions{DestinationIsZero: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d bytes: %d copied, %d skipped\n", st.Size, st.Data, st.Skipped)
	fmt.Println("allocated:", dst.Allocated())
	// Output:
	// 8388608 bytes: 1048576 copied, 7340032 skipped
	// allocated: 1048576
}

// copyNoStatus is a source whose BlockStatus is not supported after all
// (a wrapper around a backend without it).
type copyNoStatus struct{ *nbd.MemDisk }

func (copyNoStatus) BlockStatus(ctx context.Context, off, n int64, dst []nbd.Extent) ([]nbd.Extent, error) {
	return dst, fmt.Errorf("wrapped: %w", syscall.ENOTSUP)
}

func TestCopyBlockStatusUnsupported(t *testing.T) {
	src := copyNoStatus{nbd.NewMemDisk(copyTestSize)}
	copyTestFill(t, src, 6)
	dst := nbd.NewMemDisk(copyTestSize)
	st, err := nbd.Copy(context.Background(), dst, src, nbd.CopyOptions{DestinationIsZero: true})
	if err != nil {
		t.Fatal(err)
	}
	copyTestSame(t, dst, src)
	if st.Data != copyTestSize {
		t.Errorf("stats %+v: want everything copied as data", st)
	}
}
