package nbd

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/zerocopy"
)

// serverTestSocketPair returns the two ends of a unix stream socket pair,
// the first with a small send buffer, so writes to it fill it up.
func serverTestSocketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	a, b := serverTestUnixPair(t)
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

// A raw write to a socket whose peer is gone fails (EPIPE), and a raw
// read from it reports the end.
func TestServerRawPeerGone(t *testing.T) {
	a, b := serverTestSocketPair(t)
	b.Close()
	w := zerocopy.NewBatch(a)
	var m zerocopy.Message
	m.AppendBytes(make([]byte, 100))
	w.Add(&m)
	if _, err := w.Write(); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("writev to a closed peer: %v, want EPIPE", err)
	}
	r := newServerSockReader(a, func() bool { return false }, func() {})
	if n, err := r.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("read from a closed peer: %d, %v, want 0, EOF", n, err)
	}
}

// A payload read straight into its buffer takes the next request header
// with it in one system call: the header is then read without the
// socket, which by then holds only the peer's end.
func TestServerReadPayloadAhead(t *testing.T) {
	payload := make([]byte, 64<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	r, next := serverAheadPeer(t, payload)
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(readPayloader{r}, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("payload differs")
	}
	serverCheckAhead(t, r, next)
}

// ReadPages fills a group of pages from an offset into the first and
// reads the next header with them, in one readv when all of it is there.
func TestServerReadPagesAhead(t *testing.T) {
	const off = 100
	payload := make([]byte, 2*PageSize-off)
	for i := range payload {
		payload[i] = byte(i*7 + i>>12)
	}
	r, next := serverAheadPeer(t, payload)
	pages := []*[PageSize]byte{new([PageSize]byte), new([PageSize]byte)}
	n, err := r.ReadPages(pages, off)
	if err != nil || n != len(payload) {
		t.Fatalf("ReadPages = %d, %v, want %d, nil", n, err, len(payload))
	}
	if got := append(pages[0][off:], pages[1][:]...); !bytes.Equal(got, payload) {
		t.Fatal("pages differ from the payload")
	}
	serverCheckAhead(t, r, next)
}

// serverAheadPeer writes payload and a request header after it to a
// socket and closes it; it returns a reader of the other end and the
// header.
func serverAheadPeer(t *testing.T, payload []byte) (*serverSockReader, [RequestSize]byte) {
	a, b := serverTestUnixPair(t)
	var next [RequestSize]byte
	(&Request{Type: CmdRead, Cookie: 9, Offset: 4096, Length: 512}).Put(&next)
	if _, err := b.Write(append(append([]byte{}, payload...), next[:]...)); err != nil {
		t.Fatal(err)
	}
	b.Close()
	return newServerSockReader(a, func() bool { return false }, func() {}), next
}

// serverCheckAhead checks that r read the header next ahead with the
// payload, returns it first, and then the peer's end.
func serverCheckAhead(t *testing.T, r *serverSockReader, next [RequestSize]byte) {
	t.Helper()
	if len(r.ahead) != RequestSize {
		t.Fatalf("read ahead %d bytes with the payload, want the %d of the next header", len(r.ahead), RequestSize)
	}
	var hdr [RequestSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil || hdr != next {
		t.Fatalf("next header: %v, %x, want %x", err, hdr, next)
	}
	if n, err := r.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after the header: %d, %v, want 0, EOF", n, err)
	}
}

// readPayloader reads through ReadPayload, as serverReader.Read does.
type readPayloader struct{ r *serverSockReader }

func (p readPayloader) Read(b []byte) (int, error) { return p.r.ReadPayload(b) }
