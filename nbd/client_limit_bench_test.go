package nbd

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkLimit64K puts the client's 64 KiB reads beside the physical
// limit of the same machine, in one run: "unix-stream" is one raw stream of
// 64 KiB messages over a unix socket (a goroutine writing, the benchmark
// reading, nothing else), "client-qd8" is ReadAt of 64 KiB by eight
// goroutines through this package's client from this package's server on a
// prefilled MemDisk (so every reply carries data). The ratio of the two
// rates is the client's share of the machine's socket bandwidth.
//
//	go test -run '^$' -bench Limit64K -count 5 ./nbd
func BenchmarkLimit64K(b *testing.B) {
	b.Run("unix-stream", benchUnixStream64K)
	b.Run("client-qd8", benchClientQD8From64K)
}

func benchUnixStream64K(b *testing.B) {
	const size = 64 << 10
	l, err := net.Listen("unix", filepath.Join(b.TempDir(), "s"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		w, err := l.Accept()
		if err != nil {
			return
		}
		defer w.Close()
		msg := make([]byte, size)
		for {
			if _, err := w.Write(msg); err != nil {
				return
			}
		}
	}()
	r, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, size)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := io.ReadFull(r, buf); err != nil {
			b.Fatal(err)
		}
	}
}

func benchClientQD8From64K(b *testing.B) {
	const size, disk = 64 << 10, 64 << 20
	mem := NewMemDisk(disk)
	fill := make([]byte, 1<<20)
	for i := range fill {
		fill[i] = byte(i*7 + 1)
	}
	for off := int64(0); off < disk; off += int64(len(fill)) {
		if _, err := mem.WriteAt(fill, off); err != nil {
			b.Fatal(err)
		}
	}
	l, err := net.Listen("unix", filepath.Join(b.TempDir(), "nbd.sock"))
	if err != nil {
		b.Fatal(err)
	}
	srv := &Server{Exports: []Export{{Name: "m", Backend: mem}}}
	go srv.Serve(l)
	defer srv.Close()
	c, err := Dial(context.Background(), "nbd+unix:///m?socket="+l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var bufs [8][]byte
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := range bufs {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				off := i * 7 * size % (disk - size)
				if _, err := c.ReadAt(bufs[g], off); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
