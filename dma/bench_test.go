package dma

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"testing"
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
		{"streaming", Streaming, 64, 16, false},
		{"streaming-chunk32", Streaming, 128, 32, false},
		{"streaming-chunk128", Streaming, 256, 128, false},
		{"streaming-crc32-tap", Streaming, 64, 16, true},
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
