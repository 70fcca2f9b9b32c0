package nbd

import (
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
