package nbd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/internal/allocs"
	"pgregory.net/rapid"
)

// serverFullBackend is what MemDisk and FileDisk both are.
type serverFullBackend interface {
	Backend
	Flusher
	Trimmer
	Zeroer
	BlockStatuser
}

// serverCheckBackendModel runs a rapid state machine of random writes,
// reads, trims, zeroings and block status queries against a byte-slice
// model. Both disks promise that trimmed and zeroed ranges read as zeroes
// and that extents flagged ExtentZero read as zeroes.
func serverCheckBackendModel(t *rapid.T, d serverFullBackend) {
	t.Repeat(serverBackendActions(d, make([]byte, d.Size())))
}

// serverBackendActions returns serverCheckBackendModel's actions on d,
// whose contents model must hold.
func serverBackendActions(d serverFullBackend, model []byte) map[string]func(*rapid.T) {
	ctx := context.Background()
	size := d.Size()
	// Ranges favour chunk edges, where the bugs live.
	rangeGen := func(t *rapid.T) (int64, int64) {
		edge := rapid.SampledFrom([]int64{0, 1, 511, 512, MemDiskChunkSize - 1, MemDiskChunkSize, MemDiskChunkSize + 1, 2 * MemDiskChunkSize}).Draw(t, "edge")
		off := min(size, edge+rapid.Int64Range(0, size).Draw(t, "off")/4*rapid.Int64Range(0, 4).Draw(t, "k"))
		n := rapid.Int64Range(0, min(size-off, 3*MemDiskChunkSize)).Draw(t, "n")
		return off, n
	}
	return map[string]func(*rapid.T){
		"write": func(t *rapid.T) {
			off, n := rangeGen(t)
			p := make([]byte, n)
			b := rapid.Byte().Draw(t, "b")
			for i := range p {
				p[i] = b + byte(i)
			}
			if _, err := d.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
			copy(model[off:], p)
		},
		"read": func(t *rapid.T) {
			off, n := rangeGen(t)
			p := make([]byte, n)
			if _, err := d.ReadAt(p, off); err != nil && !(err == io.EOF && off+n == size && n == 0) {
				t.Fatal(err)
			}
			if !bytes.Equal(p, model[off:off+n]) {
				t.Fatalf("read [%d,+%d) differs from the model", off, n)
			}
		},
		"trim": func(t *rapid.T) {
			off, n := rangeGen(t)
			if err := d.Trim(ctx, off, n); err != nil {
				t.Fatal(err)
			}
			clear(model[off : off+n])
		},
		"zeroes": func(t *rapid.T) {
			off, n := rangeGen(t)
			flags := rapid.SampledFrom([]CmdFlags{0, FlagNoHole, FlagFastZero}).Draw(t, "flags")
			if err := d.WriteZeroes(ctx, off, n, flags); err != nil {
				t.Fatal(err)
			}
			clear(model[off : off+n])
		},
		"status": func(t *rapid.T) {
			off, n := rangeGen(t)
			if n == 0 {
				return
			}
			ext, err := d.BlockStatus(ctx, off, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(ext) == 0 {
				t.Fatal("no extents")
			}
			pos := off
			for _, e := range ext {
				if e.Length == 0 || pos+int64(e.Length) > off+n {
					t.Fatalf("extent %+v at %d outside [%d,+%d)", e, pos, off, n)
				}
				if e.Flags.Has(ExtentZero) && !bytes.Equal(model[pos:pos+int64(e.Length)], make([]byte, e.Length)) {
					t.Fatalf("extent [%d,+%d) says zero, model has data", pos, e.Length)
				}
				pos += int64(e.Length)
			}
		},
		"flush": func(t *rapid.T) {
			if err := d.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		},
		"out of range": func(t *rapid.T) {
			if _, err := d.WriteAt([]byte{1}, size); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write at the end: %v, want ENOSPC", err)
			}
			if err := d.Trim(ctx, size, 1); !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("trim at the end: %v, want EINVAL", err)
			}
		},
	}
}

func TestServerMemDiskModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.SampledFrom([]int64{1, 1000, 4 * MemDiskChunkSize, 5*MemDiskChunkSize + 123}).Draw(t, "size")
		serverCheckBackendModel(t, NewMemDisk(size))
	})
}

// The MemDisk's loans to the server (Lend, GiveBack) and its page swaps
// (TakePage) against the same model: whatever is written, trimmed,
// zeroed or swapped in while a range is lent, the lent views keep showing
// what the model held when they were lent, and the disk what it holds now.
func TestServerMemDiskLendModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.SampledFrom([]int64{1000, 4 * MemDiskChunkSize, 5*MemDiskChunkSize + 123}).Draw(t, "size")
		d := NewMemDisk(size)
		model := make([]byte, size)
		type loan struct {
			off, n int64
			views  []LentPiece
			want   []byte
		}
		var loans []loan
		actions := serverBackendActions(d, model)
		actions["lend"] = func(t *rapid.T) {
			off := rapid.Int64Range(0, size-1).Draw(t, "off")
			n := rapid.Int64Range(1, min(size-off, 3*MemDiskChunkSize)).Draw(t, "n")
			views := d.Lend(off, n, nil)
			if want := (off+n-1)/MemDiskChunkSize - off/MemDiskChunkSize + 1; int64(len(views)) != want {
				t.Fatalf("Lend [%d,+%d): %d pieces, want one per chunk piece, %d", off, n, len(views), want)
			}
			loans = append(loans, loan{off, n, views, bytes.Clone(model[off : off+n])})
		}
		actions["give back"] = func(t *rapid.T) {
			if len(loans) == 0 {
				t.Skip("nothing lent")
			}
			i := rapid.IntRange(0, len(loans)-1).Draw(t, "loan")
			d.GiveBack(loans[i].off, loans[i].n)
			loans = append(loans[:i], loans[i+1:]...)
		}
		actions["take page"] = func(t *rapid.T) {
			chunks := size / MemDiskChunkSize
			if chunks == 0 {
				t.Skip("no whole chunk")
			}
			off := rapid.Int64Range(0, chunks-1).Draw(t, "chunk") * MemDiskChunkSize
			lent := false
			for _, l := range loans {
				lent = lent || l.off < off+MemDiskChunkSize && off < l.off+l.n
			}
			before := bytes.Clone(model[off : off+MemDiskChunkSize])
			allocated := d.Allocated()
			p := new([MemDiskChunkSize]byte)
			b := rapid.Byte().Draw(t, "b")
			for i := range p {
				p[i] = b ^ byte(i>>3)
			}
			copy(model[off:], p[:])
			old, ok := d.TakePage(p, off)
			switch {
			case !ok:
				t.Fatalf("TakePage at %d refused", off)
			case lent && old != nil:
				t.Fatalf("TakePage at %d returned a chunk lent to the server", off)
			case old != nil && !bytes.Equal(old[:], before):
				t.Fatalf("TakePage at %d returned a chunk that is not the one it replaced", off)
			case old == nil && !lent && d.Allocated() == allocated:
				t.Fatalf("TakePage at %d returned nothing for an allocated chunk", off)
			}
		}
		actions[""] = func(t *rapid.T) {
			for _, l := range loans {
				pos := l.off
				for _, p := range l.views {
					v, k := p.Data, int64(p.Len)
					if want := min(MemDiskChunkSize-pos%MemDiskChunkSize, l.off+l.n-pos); k != want || v != nil && int64(len(v)) != k {
						t.Fatalf("lent [%d,+%d): piece at %d of %d bytes (%d viewed), want %d", l.off, l.n, pos, k, len(v), want)
					}
					want := l.want[pos-l.off : pos-l.off+k]
					if v == nil && !bytes.Equal(want, make([]byte, k)) {
						t.Fatalf("lent [%d,+%d): hole at %d, the model had data", l.off, l.n, pos)
					}
					if v != nil && !bytes.Equal(v, want) {
						t.Fatalf("lent [%d,+%d): the view at %d changed under the loan", l.off, l.n, pos)
					}
					pos += k
				}
			}
		}
		t.Repeat(actions)
		for _, l := range loans {
			d.GiveBack(l.off, l.n)
		}
		for i := range d.loans {
			if n := d.loans[i].Load(); n != 0 {
				t.Fatalf("chunk %d: %d loans outstanding after every loan was given back", i, n)
			}
		}
	})
}

// A lent chunk is copied before a write, once given back it is written in
// place again: steady state allocates nothing.
func TestServerMemDiskLendCopiesOnWrite(t *testing.T) {
	d := NewMemDisk(2 * MemDiskChunkSize)
	d.WriteAt(bytes.Repeat([]byte{1}, MemDiskChunkSize), 0)
	views := d.Lend(100, 200, nil)
	d.WriteAt(bytes.Repeat([]byte{2}, 300), 0)
	if !bytes.Equal(views[0].Data, bytes.Repeat([]byte{1}, 200)) {
		t.Fatal("a write under a loan changed the lent view")
	}
	got := make([]byte, 300)
	d.ReadAt(got, 0)
	if !bytes.Equal(got, bytes.Repeat([]byte{2}, 300)) {
		t.Fatal("a write under a loan is not on the disk")
	}
	d.GiveBack(100, 200)
	p := []byte{3}
	if n := allocs.PerRun(1000, func() {
		d.Lend(0, MemDiskChunkSize, views[:0])
		d.GiveBack(0, MemDiskChunkSize)
		d.WriteAt(p, 5)
	}); n > allocs.Slack {
		t.Fatalf("lend, give back and write: %v allocations, want 0", n)
	}
}

func TestServerFileDiskModel(t *testing.T) {
	dir := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.SampledFrom([]int64{4096, 4 * MemDiskChunkSize, 5*MemDiskChunkSize + 4096}).Draw(t, "size")
		path := filepath.Join(dir, "disk")
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		d, err := OpenFileDisk(path, false)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		serverCheckBackendModel(t, d)
	})
}

func TestServerMemDiskTrimFrees(t *testing.T) {
	d := NewMemDisk(4 * MemDiskChunkSize)
	d.WriteAt(make([]byte, 3*MemDiskChunkSize), 100)
	if got := d.Allocated(); got != 4*MemDiskChunkSize {
		t.Fatalf("allocated %d after writing 4 chunks", got)
	}
	d.Trim(context.Background(), MemDiskChunkSize-1, 2*MemDiskChunkSize+2)
	if got := d.Allocated(); got != 2*MemDiskChunkSize {
		t.Fatalf("allocated %d after trimming 2 whole chunks", got)
	}
	d.WriteZeroes(context.Background(), 0, 4*MemDiskChunkSize, FlagNoHole)
	if got := d.Allocated(); got != 4*MemDiskChunkSize {
		t.Fatalf("allocated %d after NO_HOLE zeroes, want all", got)
	}
}

// Concurrent writers on distinct ranges and readers everywhere: run with
// -race, each writer's bytes must be intact.
func TestServerMemDiskConcurrent(t *testing.T) {
	d := NewMemDisk(16 * MemDiskChunkSize)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			p := bytes.Repeat([]byte{byte(g + 1)}, 3000)
			for i := range 50 {
				off := int64(g)*2*MemDiskChunkSize + int64(i*1000)%(2*MemDiskChunkSize-3000)
				d.WriteAt(p, off)
				q := make([]byte, len(p))
				d.ReadAt(q, off)
				if !bytes.Equal(p, q) {
					t.Errorf("writer %d lost its bytes", g)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			q := make([]byte, 5000)
			for i := range 50 {
				d.ReadAt(q, int64(i*7919)%(16*MemDiskChunkSize-5000))
				d.BlockStatus(context.Background(), 0, d.Size(), nil)
			}
		}()
	}
	wg.Wait()
}

func BenchmarkServerMemDiskRead4K(b *testing.B) {
	d := NewMemDisk(64 << 20)
	d.WriteAt(make([]byte, 64<<20), 0)
	p := make([]byte, 4096)
	b.SetBytes(4096)
	b.ReportAllocs()
	var off int64
	for b.Loop() {
		d.ReadAt(p, off)
		off = (off + 4096*17) % (64<<20 - 4096)
	}
}
