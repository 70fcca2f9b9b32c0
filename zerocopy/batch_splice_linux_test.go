package zerocopy

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

// A spliced batch reaches the reader whole and in order, whatever the
// socket takes at a time: pieces empty and large, more of them than one
// vmsplice takes, more bytes than the pipe holds, a reader slower than the
// writer; batches under the threshold go by writev. The writer keeps no
// view of the buffers, and the test changes none before the reader has it.
func TestBatchSplice(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		a, b := smallBufferPair(t)
		defer a.Close()
		defer b.Close()
		bt := NewBatch(a)
		least := rapid.SampledFrom([]int{1, 4096, 1 << 20}).Draw(rt, "min")
		bt.SetSplice(least)
		defer bt.SetSplice(0)
		setSndbuf(t, a, 16384) // small again, so that splices find it full
		rounds := rapid.IntRange(1, 3).Draw(rt, "rounds")
		var spliced int64
		for r := range rounds {
			pieces := rapid.SampledFrom([]int{1, 2, 5, iovMax, iovMax + 1}).Draw(rt, "pieces")
			var want []byte
			var keep [][]byte // the socket points at them until the reader has read them
			for i := range pieces {
				n := rapid.SampledFrom([]int{0, 1, 28, 4096, 5000, 65536, 300000}).Draw(rt, "size")
				if len(want) > 256<<10 {
					n = min(n, 28)
				}
				p := bytes.Repeat([]byte{byte(i), byte(i >> 8), byte(r), 0xa5}, n)[:n]
				bt.AddBytes(p)
				keep = append(keep, p)
				want = append(want, p...)
			}
			chunk := rapid.SampledFrom([]int{509, 4096, 100000}).Draw(rt, "read size")
			got := readInChunks(b, len(want), chunk)
			n, err := bt.Write()
			if err != nil || n != int64(len(want)) {
				rt.Fatalf("%d pieces, %d bytes: wrote %d, %v", pieces, len(want), n, err)
			}
			if out := <-got; !bytes.Equal(out, want) {
				rt.Fatalf("%d pieces, %d bytes: the reader got %d bytes, not the same", pieces, len(want), len(out))
			}
			runtime.KeepAlive(keep)
			if len(want) >= least {
				spliced += int64(len(want))
			}
		}
		if got := bt.Spliced(); got != spliced {
			rt.Fatalf("Spliced() = %d, want %d (threshold %d)", got, spliced, least)
		}
		for _, v := range bt.raw.iov[:cap(bt.raw.iov)] {
			if v.Base != nil {
				rt.Fatal("the writer keeps a reference to a written buffer")
			}
		}
	})
}

// The kernel refuses to splice into a file opened for appending: the
// batch goes out by writev instead, whole, and so do later ones.
func TestBatchSpliceRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bt := NewBatch(f)
	bt.SetSplice(1)
	var want []byte
	for i := range 2 {
		p := bytes.Repeat([]byte{byte('a' + i)}, 70000)
		bt.AddBytes([]byte("header"))
		bt.AddBytes(p)
		want = append(append(want, "header"...), p...)
		if n, err := bt.Write(); err != nil || n != int64(6+len(p)) {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	if bt.Spliced() != 0 {
		t.Fatalf("Spliced() = %d into an O_APPEND file, want 0", bt.Spliced())
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Fatalf("the file holds %d bytes, not the %d written", len(got), len(want))
	}
}

// SetSplice(0) closes the pipe: the process has as many descriptors open
// as before the batch spliced.
func TestBatchSpliceClosesPipe(t *testing.T) {
	a, b := socketPair(t)
	defer a.Close()
	defer b.Close()
	before := openFDs(t)
	bt := NewBatch(a)
	bt.SetSplice(1)
	bt.AddBytes(make([]byte, 8192))
	go b.Read(make([]byte, 8192))
	if _, err := bt.Write(); err != nil {
		t.Fatal(err)
	}
	if bt.Spliced() != 8192 {
		t.Fatalf("Spliced() = %d, want 8192", bt.Spliced())
	}
	if n := openFDs(t); n != before+2 {
		t.Fatalf("%d descriptors open while splicing, want %d (a pipe more)", n, before+2)
	}
	bt.SetSplice(0)
	if n := openFDs(t); n != before {
		t.Fatalf("%d descriptors open after SetSplice(0), want %d", n, before)
	}
}

func setSndbuf(t *testing.T, c *net.UnixConn, n int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, n)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// BenchmarkBatchSplice streams batches of a 28-byte header and a 64 KiB
// payload into a unix socket drained by another goroutine, by writev and
// by splice, in one run.
//
//	go test -run '^$' -bench BatchSplice -count 5 ./zerocopy
func BenchmarkBatchSplice(b *testing.B) {
	for _, v := range []struct {
		name string
		min  int
	}{{"writev", 0}, {"splice", 1}} {
		b.Run(v.name, func(b *testing.B) {
			x, y := socketPair(b)
			defer x.Close()
			defer y.Close()
			go func() {
				buf := make([]byte, 1<<20)
				for {
					if _, err := y.Read(buf); err != nil {
						return
					}
				}
			}()
			bt := NewBatch(x)
			bt.SetSplice(v.min)
			defer bt.SetSplice(0)
			hdr := make([]byte, 28)
			bufs := make([][]byte, 8)
			for i := range bufs {
				bufs[i] = bytes.Repeat([]byte{byte(i)}, 64<<10)
			}
			b.SetBytes(64<<10 + 28)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				bt.AddBytes(hdr)
				bt.AddBytes(bufs[i%len(bufs)])
				i++
				if _, err := bt.Write(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
