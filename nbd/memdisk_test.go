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
	ctx := context.Background()
	size := d.Size()
	model := make([]byte, size)
	// Ranges favour chunk edges, where the bugs live.
	rangeGen := func(t *rapid.T) (int64, int64) {
		edge := rapid.SampledFrom([]int64{0, 1, 511, 512, MemDiskChunkSize - 1, MemDiskChunkSize, MemDiskChunkSize + 1, 2 * MemDiskChunkSize}).Draw(t, "edge")
		off := min(size, edge+rapid.Int64Range(0, size).Draw(t, "off")/4*rapid.Int64Range(0, 4).Draw(t, "k"))
		n := rapid.Int64Range(0, min(size-off, 3*MemDiskChunkSize)).Draw(t, "n")
		return off, n
	}
	t.Repeat(map[string]func(*rapid.T){
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
	})
}

func TestServerMemDiskModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.SampledFrom([]int64{1, 1000, 4 * MemDiskChunkSize, 5*MemDiskChunkSize + 123}).Draw(t, "size")
		serverCheckBackendModel(t, NewMemDisk(size))
	})
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
