package dma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net"
	"path/filepath"
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
		spin   time.Duration
		inline int64
	}{
		{"streaming", Streaming, 0, 0, false, 0, 0}, // the defaults: 128 blocks, 32-sector chunks, DefaultSpin
		{"streaming-fifo64-chunk16", Streaming, 64, 16, false, 0, 0},
		{"streaming-fifo256-chunk128", Streaming, 256, 128, false, 0, 0},
		{"streaming-crc32-tap", Streaming, 0, 0, true, 0, 0},
		{"streaming-spin-park", Streaming, 0, 0, false, -1, 0},
		{"streaming-spin-50us", Streaming, 0, 0, false, 50 * time.Microsecond, 0},
		{"streaming-inline", Streaming, 0, 0, false, 0, n},
		{"streaming-inline-chunk128", Streaming, 0, 128, false, 0, n},
		{"store-and-forward", StoreAndForward, 0, 0, false, 0, 0},
	} {
		for _, dir := range []Direction{ToHost, ToDevice} {
			b.Run(fmt.Sprintf("%s/%v", tc.name, dir), func(b *testing.B) {
				c := Config{Mode: tc.mode, FIFOBlocks: tc.blocks, ChunkSectors: tc.chunk, Spin: tc.spin, InlineMax: tc.inline}
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

// sockDev is a device behind a unix socket, the shape of a network block
// device client: WriteAt sends the data to a server goroutine and waits
// for its 1-byte acknowledgement, ReadAt sends a 1-byte request and reads
// the data the server sends back. The server is another goroutine of the
// same program, so the engine's spinning competes with it for the
// processors, as with an NBD client and its reply reader.
type sockDev struct {
	c   net.Conn
	ack [1]byte
}

func (d *sockDev) WriteAt(p []byte, off int64) (int, error) {
	if _, err := d.c.Write(p); err != nil {
		return 0, err
	}
	_, err := io.ReadFull(d.c, d.ack[:])
	return len(p), err
}

func (d *sockDev) ReadAt(p []byte, off int64) (int, error) {
	if _, err := d.c.Write(d.ack[:]); err != nil {
		return 0, err
	}
	return io.ReadFull(d.c, p)
}

// BenchmarkSpin measures what Config.Spin costs a backend that needs the
// processor while a side of the engine spins: 64 KiB transfers in one
// 128-sector chunk (one backend call per transfer, as the NHD bridge's
// zero-copy datapath makes) to and from a sockDev. On a machine with few
// cores a long spin slows the backend's goroutines; park (-1) pays a
// goroutine wake-up per hand-off instead.
//
// "inline" runs the transfer on the caller's goroutine (Config.InlineMax):
// no worker, so no spin and no wake-up.
func BenchmarkSpin(b *testing.B) {
	const n = 64 << 10
	const inline = time.Duration(math.MinInt64)
	for _, spin := range []time.Duration{inline, -1, time.Microsecond, 2 * time.Microsecond, 5 * time.Microsecond, 20 * time.Microsecond, 50 * time.Microsecond} {
		name := "park"
		switch {
		case spin == inline:
			name = "inline"
		case spin > 0:
			name = spin.String()
		}
		for _, dir := range []Direction{ToHost, ToDevice} {
			b.Run(fmt.Sprintf("%s/%v", name, dir), func(b *testing.B) {
				l, err := net.Listen("unix", filepath.Join(b.TempDir(), "s"))
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				go func() {
					c, err := l.Accept()
					if err != nil {
						return
					}
					defer c.Close()
					buf := make([]byte, n)
					for {
						var err error
						if dir == ToDevice {
							if _, err = io.ReadFull(c, buf); err == nil {
								_, err = c.Write(buf[:1])
							}
						} else if _, err = io.ReadFull(c, buf[:1]); err == nil {
							_, err = c.Write(buf)
						}
						if err != nil {
							return
						}
					}
				}()
				c, err := net.Dial("unix", l.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				dev := &sockDev{c: c}
				cfg := Config{FIFOBlocks: n / SectorSize, ChunkSectors: n / SectorSize, Spin: spin}
				if spin == inline {
					cfg.Spin, cfg.InlineMax = 0, n
				}
				e, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				e.SetRegions(make([]byte, n))
				b.ReportAllocs()
				b.SetBytes(n)
				for b.Loop() {
					if dir == ToHost {
						err = e.DeviceToHost(dev, 0, n)
					} else {
						err = e.HostToDevice(dev, 0, n)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// ringDev is a memory device that keeps requests in flight
// (AsyncReaderAt, AsyncWriterAt) in a fixed ring, doing each request's
// copy when it is waited for; it allocates nothing.
type ringDev struct {
	data []byte
	reqs [32]struct {
		write bool
		p     []byte
		off   int64
		gen   uint32
		live  bool
	}
}

var errRingHandle = errors.New("ringDev: handle not in flight")

func (r *ringDev) ReadAt(p []byte, off int64) (int, error)  { return copy(p, r.data[off:]), nil }
func (r *ringDev) WriteAt(p []byte, off int64) (int, error) { return copy(r.data[off:], p), nil }

func (r *ringDev) start(write bool, p []byte, off int64) (Handle, error) {
	for i := range r.reqs {
		if q := &r.reqs[i]; !q.live {
			q.gen++
			q.write, q.p, q.off, q.live = write, p, off, true
			return Handle(q.gen)<<32 | Handle(i+1), nil
		}
	}
	return 0, errors.New("ringDev: full")
}

func (r *ringDev) StartReadAt(_ context.Context, p []byte, off int64) (Handle, error) {
	return r.start(false, p, off)
}

func (r *ringDev) StartWriteAt(_ context.Context, p []byte, off int64) (Handle, error) {
	return r.start(true, p, off)
}

func (r *ringDev) Wait(_ context.Context, h Handle) error {
	i := int(uint32(h)) - 1
	if i < 0 || i >= len(r.reqs) || !r.reqs[i].live || r.reqs[i].gen != uint32(h>>32) {
		return errRingHandle
	}
	q := &r.reqs[i]
	q.live = false
	if q.write {
		copy(r.data[q.off:], q.p)
	} else {
		copy(q.p, r.data[q.off:])
	}
	return nil
}

// BenchmarkInlineAsync: a 64 KiB inline transfer from and to a device that
// keeps its requests in flight (readAhead, writeBehind), four 16 KiB
// chunks at a time. It allocates nothing.
func BenchmarkInlineAsync(b *testing.B) {
	const n = 64 << 10
	for _, dir := range []Direction{ToHost, ToDevice} {
		b.Run(dir.String(), func(b *testing.B) {
			e, err := New(Config{InlineMax: n})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			e.SetRegions(make([]byte, n))
			dev := &ringDev{data: make([]byte, n)}
			b.ReportAllocs()
			b.SetBytes(n)
			for b.Loop() {
				if dir == ToHost {
					err = e.DeviceToHost(dev, 0, n)
				} else {
					err = e.HostToDevice(dev, 0, n)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
