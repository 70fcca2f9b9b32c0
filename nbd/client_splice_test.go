package nbd

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// splicedBytes sums what the connections of c have spliced.
func splicedBytes(c *Client) int64 {
	var n int64
	for _, cc := range c.conns {
		n += cc.wb.Spliced()
	}
	return n
}

// spliceServer serves a MemDisk of size bytes on network ("unix" or
// "tcp") and returns its URI.
func spliceServer(t testing.TB, network string, size int64) (string, *MemDisk) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "nbd.sock")
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	mem := NewMemDisk(size)
	srv := &Server{Exports: []Export{{Name: "m", Backend: mem}}}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	if network == "unix" {
		return "nbd+unix:///m?socket=" + l.Addr().String(), mem
	}
	return "nbd://" + l.Addr().String() + "/m", mem
}

// With WithSplicedWrites, writes of every size from many goroutines reach
// the server whole over a unix socket and TCP, on one connection and on
// several, and the large ones go by splice (on Linux); without the option
// nothing is spliced.
func TestClientSplicedWrites(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		for _, conns := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/conns=%d", network, conns), func(t *testing.T) {
				uri, mem := spliceServer(t, network, 64<<20)
				c := clientDial(t, uri, WithSplicedWrites(), WithConnections(conns))
				clientHammer(t, c, 8, 40, 64<<10)
				clientHammer(t, c, 8, 40, 4096)
				// One write larger than the pipe and the socket's
				// buffer, one split over the maximum payload.
				for _, n := range []int{3 << 20, 40 << 20} {
					buf := make([]byte, n)
					for i := range buf {
						buf[i] = byte(i*13 + n)
					}
					if _, err := c.WriteAt(buf, 8<<20); err != nil {
						t.Fatal(err)
					}
					got := make([]byte, n)
					if _, err := mem.ReadAt(got, 8<<20); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, buf) {
						t.Fatalf("a %d-byte write reached the disk wrong", n)
					}
				}
				if runtime.GOOS == "linux" && splicedBytes(c) < 40<<20 {
					t.Fatalf("%d bytes spliced, want at least the 40 MiB write", splicedBytes(c))
				}
			})
		}
	}
	t.Run("without", func(t *testing.T) {
		uri, _ := spliceServer(t, "unix", 16<<20)
		c := clientDial(t, uri)
		clientHammer(t, c, 4, 10, 64<<10)
		if n := splicedBytes(c); n != 0 {
			t.Fatalf("%d bytes spliced without WithSplicedWrites", n)
		}
	})
}

// The asynchronous calls keep their buffers until Wait returns: with
// spliced writes, each of many WRITEs in flight from one goroutine
// stores its own buffer's bytes, the buffers changed only after Wait.
func TestClientSplicedWritesAsync(t *testing.T) {
	uri, mem := spliceServer(t, "unix", 16<<20)
	c := clientDial(t, uri, WithSplicedWrites())
	ctx := context.Background()
	const depth, size, rounds = 8, 64 << 10, 20
	bufs := make([][]byte, depth)
	calls := make([]Call, depth)
	started := make([]bool, depth)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	want := make([]byte, 16<<20)
	for r := range rounds {
		for i := range depth {
			if started[i] {
				if err := calls[i].Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for j := range bufs[i] {
				bufs[i][j] = byte(r*depth + i + j)
			}
			off := int64((r*depth + i) % 256 * size)
			copy(want[off:], bufs[i])
			var err error
			if calls[i], err = c.StartWrite(ctx, bufs[i], off, 0); err != nil {
				t.Fatal(err)
			}
			started[i] = true
		}
	}
	var wg sync.WaitGroup
	for _, call := range calls {
		wg.Go(func() {
			if err := call.Wait(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got := make([]byte, len(want))
	if _, err := mem.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the disk does not hold what the writes carried")
	}
	if runtime.GOOS == "linux" && splicedBytes(c) == 0 {
		t.Fatal("nothing spliced")
	}
}

// Against nbdkit: spliced writes read back whole.
func TestClientSplicedWritesNbdkit(t *testing.T) {
	_, uri := clientNbdkit(t, "memory", "size=64M")
	c := clientDial(t, uri, WithSplicedWrites())
	clientHammer(t, c, 8, 40, 64<<10)
	if runtime.GOOS == "linux" && splicedBytes(c) == 0 {
		t.Fatal("nothing spliced")
	}
}

// BenchmarkClientWriteSpliced writes 64 KiB at depth 8 (goroutines) to this
// package's server on a unix socket, copied (writev) and spliced
// (WithSplicedWrites), in one run; compare the two with -count and
// interleave runs on a quiet machine.
//
//	go test -run '^$' -bench ClientWriteSpliced -count 5 ./nbd
func BenchmarkClientWriteSpliced(b *testing.B) {
	for _, v := range []struct {
		name string
		opts []Option
	}{{"copied", nil}, {"spliced", []Option{WithSplicedWrites()}}} {
		b.Run(v.name, func(b *testing.B) {
			uri, _ := spliceServer(b, "unix", 64<<20)
			c, err := Dial(context.Background(), uri, v.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.SetBytes(64 << 10)
			b.ReportAllocs()
			b.SetParallelism(4) // 8 goroutines on 2 processors
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 64<<10)
				for i := range buf {
					buf[i] = byte(i)
				}
				off := int64(0)
				for pb.Next() {
					if _, err := c.WriteAt(buf, off); err != nil {
						b.Error(err)
						return
					}
					off = (off + 64<<10) % (64 << 20)
				}
			})
		})
	}
}
