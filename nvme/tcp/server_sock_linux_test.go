package tcp

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"testing"
)

// A payload read straight into its buffer takes what follows it (up to
// fillAfterDirect bytes: a digest and the next command's header) in the
// same system call, and the next read takes those bytes without the
// socket, which by then holds only the peer's end.
func TestSockReaderDirectAhead(t *testing.T) {
	// A unix socket, not TCP: its receive queue holds everything written
	// before the read begins, with no window to open, so what a read finds
	// does not depend on timing.
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	peer, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	nc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	payload := make([]byte, 64<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	next := make([]byte, fillAfterDirect+100) // a header and the start of its data
	for i := range next {
		next[i] = byte(255 - i)
	}
	if _, err := peer.Write(append(append([]byte{}, payload...), next...)); err != nil {
		t.Fatal(err)
	}
	peer.(*net.UnixConn).CloseWrite()

	s := newSockReader(&conn{nc: nc})
	got := make([]byte, len(payload))
	if _, err := io.ReadFull((*directReader)(s), got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("payload differs")
	}
	if len(s.ahead) != fillAfterDirect {
		t.Fatalf("read ahead %d bytes with the payload, want %d", len(s.ahead), fillAfterDirect)
	}
	rest, err := io.ReadAll(s)
	if err != nil || !bytes.Equal(rest, next) {
		t.Fatalf("after the payload: %v, %d bytes, want the %d that followed it", err, len(rest), len(next))
	}
}
