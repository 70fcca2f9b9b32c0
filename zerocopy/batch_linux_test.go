package zerocopy

import (
	"bytes"
	"net"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

// smallBufferPair returns the two ends of a unix stream socket pair, the
// first with a small send buffer, so writes to it fill it up.
func smallBufferPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	x, y := socketPair(t)
	a, b := x.(*net.UnixConn), y.(*net.UnixConn)
	rc, err := a.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 16384)
	})
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// readInChunks reads n bytes from c, at most chunk at a time, on another
// goroutine, and sends them (fewer on an error).
func readInChunks(c net.Conn, n, chunk int) <-chan []byte {
	got := make(chan []byte, 1)
	go func() {
		var out []byte
		p := make([]byte, chunk)
		for len(out) < n {
			k, err := c.Read(p[:min(chunk, n-len(out))])
			if err != nil {
				break
			}
			out = append(out, p[:k]...)
		}
		got <- out
	}()
	return got
}

// The raw writer writes every piece whole and in order, whatever the
// socket takes at a time: pieces empty and large, more of them than one
// writev takes, a reader slower than the writer.
func TestRawWriter(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		a, b := smallBufferPair(t)
		defer a.Close()
		defer b.Close()
		rc, err := a.SyscallConn()
		if err != nil {
			rt.Fatal(err)
		}
		w := newRawWriter(rc)
		pieces := rapid.SampledFrom([]int{1, 2, 5, iovMax, iovMax + 1, 3 * iovMax / 2}).Draw(rt, "pieces")
		var bufs [][]byte
		var want []byte
		for i := range pieces {
			n := rapid.SampledFrom([]int{0, 1, 7, 4096, 5000, 70000}).Draw(rt, "size")
			if len(want) > 256<<10 {
				n = min(n, 7)
			}
			p := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xa5}, n)[:n]
			bufs = append(bufs, p)
			want = append(want, p...)
		}
		chunk := rapid.IntRange(1, 100000).Draw(rt, "read size")
		got := readInChunks(b, len(want), chunk)
		if _, err := w.writev(bufs); err != nil {
			rt.Fatalf("%d pieces, %d bytes: %v", pieces, len(want), err)
		}
		if out := <-got; !bytes.Equal(out, want) {
			rt.Fatalf("%d pieces, %d bytes: the reader got %d bytes, not the same", pieces, len(want), len(out))
		}
		for _, v := range w.iov[:cap(w.iov)] {
			if v.Base != nil {
				rt.Fatal("the writer keeps a reference to a written buffer")
			}
		}
	})
}
