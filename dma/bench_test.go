package dma

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"testing"
	"time"
)

// BenchmarkTransfer moves 64 KiB transfers in wall-clock mode through a
// FIFO of 512-byte blocks: from an in-memory device into host memory (a
// read) and back (a write). copy is the anchor: one copy() of 64 KiB.
func BenchmarkTransfer(b *testing.B) {
	const n = 64 << 10
	b.Run("copy", func(b *testing.B) {
		src, dst := make([]byte, n), make([]byte, n)
		b.ReportAllocs()
		b.SetBytes(n)
		for b.Loop() {
			copyOnce(dst, src)
		}
	})
	for _, tc := range []struct {
		name   string
		mode   Mode
		blocks int
		chunk  int
		tap    bool
	}{
		{"streaming", Streaming, 0, 0, false}, // the defaults: 128 blocks, 32-sector chunks
		{"streaming-fifo64-chunk16", Streaming, 64, 16, false},
		{"streaming-fifo256-chunk128", Streaming, 256, 128, false},
		{"streaming-crc32-tap", Streaming, 0, 0, true},
		{"store-and-forward", StoreAndForward, 0, 0, false},
	} {
		for _, dir := range []Direction{ToHost, ToDevice} {
			b.Run(fmt.Sprintf("%s/%v", tc.name, dir), func(b *testing.B) {
				c := Config{Mode: tc.mode, FIFOBlocks: tc.blocks, ChunkSectors: tc.chunk}
				if tc.tap {
					c.Tap = crc32.NewIEEE()
				}
				e, err := New(c)
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				host := make([]byte, n)
				e.SetRegions(host)
				src := bytes.NewReader(make([]byte, n))
				dst := newDev(make([]byte, n))
				b.ReportAllocs()
				b.SetBytes(n)
				for b.Loop() {
					var err error
					if dir == ToHost {
						err = e.DeviceToHost(src, 0, n)
					} else {
						err = e.HostToDevice(dst, 0, n)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

//go:noinline
func copyOnce(dst, src []byte) { copy(dst, src) }

// spinFor busy-waits for d: a stand-in for work that takes time on a core
// (a network backend's reads, a checksum engine), finer than time.Sleep.
func spinFor(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// slowDev is a device whose reads take 1 ns per byte (1 GB/s).
type slowDev struct{ r *bytes.Reader }

func (d slowDev) ReadAt(p []byte, off int64) (int, error) {
	spinFor(time.Duration(len(p)))
	return d.r.ReadAt(p, off)
}

// BenchmarkOverlap measures the overlap in wall-clock time. The backend
// takes 1 ns per byte to read and the tap 1 ns per byte to look at the data
// (both busy-wait, plus the cost of reading the clock). "no-room" streams
// with a FIFO that holds one chunk, so the producer waits for the consumer to
// free the whole chunk and the two sides take turns; "overlap" has room for
// two chunks and the same calls, so with two idle cores the sides run at
// once and take about half the time. store-and-forward makes two calls per
// sector.
func BenchmarkOverlap(b *testing.B) {
	const n = 64 << 10
	for _, tc := range []struct {
		name          string
		mode          Mode
		blocks, chunk int
	}{
		{"store-and-forward", StoreAndForward, 0, 0},
		{"streaming-no-room", Streaming, 16, 16},
		{"streaming-overlap", Streaming, 32, 16},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e, err := New(Config{Mode: tc.mode, FIFOBlocks: tc.blocks, ChunkSectors: tc.chunk,
				Tap: TapFunc(func(p []byte) { spinFor(time.Duration(len(p))) })})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			e.SetRegions(make([]byte, n))
			src := slowDev{bytes.NewReader(make([]byte, n))}
			b.ReportAllocs()
			b.SetBytes(n)
			for b.Loop() {
				if err := e.DeviceToHost(src, 0, n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
