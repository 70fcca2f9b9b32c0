package zerocopy

import (
	"bytes"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/internal/allocs"
	"pgregory.net/rapid"
)

// countingWriter records each Write.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// batchMessages fills msgs from the drawn layouts: each message a payload
// in pooled buffers, a header pushed in front, and maybe caller bytes.
func batchMessages(t *rapid.T, p *Pool, msgs []*Message) []byte {
	var want []byte
	for i, m := range msgs {
		payload := rapid.SliceOfN(rapid.Byte(), 0, 3*p.Size()).Draw(t, "payload")
		if _, err := m.ReadFromN(bytes.NewReader(payload), int64(len(payload))); err != nil {
			t.Fatal(err)
		}
		h, err := m.Push(8)
		if err != nil {
			t.Fatal(err)
		}
		for k := range h {
			h[k] = byte(i)
		}
		tail := []byte("tail")
		m.AppendBytes(tail)
		want = append(append(append(want, h...), payload...), tail...)
	}
	return want
}

// Whatever the messages, a batch writes their bytes in order: on a writer
// without writev in one Write, on a socket (raw writev on Linux) in full.
func TestBatchWritesMessagesInOrder(t *testing.T) {
	p := newTestPool(t, 64, 16, true)
	rapid.Check(t, func(t *rapid.T) {
		msgs := make([]*Message, rapid.IntRange(1, 5).Draw(t, "messages"))
		for i := range msgs {
			msgs[i] = NewMessage(p)
		}
		var want []byte
		var w countingWriter
		b := NewBatch(&w)
		for _, m := range msgs {
			want = append(want, batchMessages(t, p, []*Message{m})...)
			b.Add(m)
			// Caller bytes after each message, as an AddBytes piece.
			extra := rapid.SliceOfN(rapid.Byte(), 0, 9).Draw(t, "extra")
			b.AddBytes(extra)
			want = append(want, extra...)
		}
		if b.Len() != len(want) {
			t.Fatalf("Len %d, want %d", b.Len(), len(want))
		}
		n, err := b.Write()
		if err != nil || n != int64(len(want)) || !bytes.Equal(w.Bytes(), want) {
			t.Fatalf("Write: %d, %v; got %q, want %q", n, err, w.Bytes(), want)
		}
		if w.writes != 1 {
			t.Fatalf("%d Writes for one batch, want 1", w.writes)
		}
		if b.Len() != 0 {
			t.Fatal("batch not empty after Write")
		}
		for _, m := range msgs {
			m.Release()
		}
	})
}

// socketPair returns the two ends of a unix stream socketpair as net.Conns.
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	return conn(fds[0]), conn(fds[1])
}

// On a socket, a batch larger than the socket buffer and with more
// fragments than one writev takes is written whole, and steady state
// allocates nothing.
func TestBatchSocket(t *testing.T) {
	a, z := socketPair(t)
	p := newTestPool(t, 4096, 16, false)
	b := NewBatch(a)
	m := NewMessage(p)
	const frags = 1500
	var want []byte
	for i := range frags {
		k := []byte{byte(i), byte(i >> 8), 3, 4, 5}
		m.AppendBytes(k)
		want = append(want, k...)
	}
	big := bytes.Repeat([]byte{7}, 4<<20)
	m.AppendBytes(big)
	want = append(want, big...)
	got := make(chan []byte)
	go func() {
		buf := make([]byte, len(want))
		io.ReadFull(z, buf)
		got <- buf
	}()
	b.Add(m)
	if n, err := b.Write(); err != nil || n != int64(len(want)) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if !bytes.Equal(<-got, want) {
		t.Fatal("the socket received other bytes")
	}
	m.Release()

	small := NewMessage(p)
	go io.Copy(io.Discard, z)
	nallocs := allocs.PerRun(1000, func() {
		small.AppendBytes(want[:100])
		b.Add(small)
		b.Add(small)
		if _, err := b.Write(); err != nil {
			t.Fatal(err)
		}
		small.Release()
	})
	if nallocs > allocs.Slack {
		t.Fatalf("Add and Write: %v allocations, want 0", nallocs)
	}
}

// AddPrefix takes exactly the first n bytes of the views, in order, cutting
// at most one piece, and leaves the rest: written window by window, the
// views make the bytes they hold, each window but the last n bytes.
func TestBatchAddPrefix(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		pieces := rapid.SliceOfN(rapid.SliceOfN(rapid.Byte(), 0, 40), 0, 8).Draw(rt, "pieces")
		n := rapid.IntRange(1, 50).Draw(rt, "n")
		want := bytes.Join(pieces, nil)
		var w countingWriter
		b := NewBatch(&w)
		views := append([][]byte(nil), pieces...)
		for len(views) > 0 {
			views = b.AddPrefix(views, n)
			before := w.Len()
			if _, err := b.Write(); err != nil {
				rt.Fatal(err)
			}
			if got := w.Len() - before; got != n && len(views) > 0 {
				rt.Fatalf("a window of %d bytes with views left, want %d", got, n)
			}
		}
		if !bytes.Equal(w.Bytes(), want) {
			rt.Fatalf("windows wrote %q, want %q", w.Bytes(), want)
		}
	})
}

// A window cut inside a piece leaves that piece's rest first.
func TestBatchAddPrefixCut(t *testing.T) {
	var w countingWriter
	b := NewBatch(&w)
	rest := b.AddPrefix([][]byte{[]byte("abc"), []byte("defg"), []byte("h")}, 5)
	if b.Len() != 5 || len(rest) != 2 || string(rest[0]) != "fg" || string(rest[1]) != "h" {
		t.Fatalf("AddPrefix 5 of abc|defg|h: batch %d bytes, rest %q", b.Len(), rest)
	}
	if _, err := b.Write(); err != nil || w.String() != "abcde" {
		t.Fatalf("wrote %q, %v", w.String(), err)
	}
	if rest := b.AddPrefix(nil, 5); len(rest) != 0 || b.Len() != 0 {
		t.Fatalf("AddPrefix of nothing: %q, %d bytes", rest, b.Len())
	}
}
