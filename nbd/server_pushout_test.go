package nbd

import (
	"io"
	"strings"
	"testing"
	"time"
)

// A handshake pushed out by newer connections is told why: the option
// it is sending is answered NBD_REP_ERR_SHUTDOWN with a message naming
// the reason, its ABORT with an ACK, and it no longer holds a
// MaxHandshakes place while it says goodbye.
func TestServerPushedOutHandshakeToldWhy(t *testing.T) {
	s := &Server{MaxHandshakes: 2, Exports: []Export{{Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	a, b := serverTestDial(t, path), serverTestDial(t, path)
	a.hello(ClientFixedNewstyle | ClientNoZeroes)
	b.hello(ClientFixedNewstyle | ClientNoZeroes)
	// a is in the middle of an option: its header is sent, its data not.
	var hb [OptionHeaderSize]byte
	h := OptionHeader{Option: OptList, Length: 0}
	h.Put(&hb)
	a.write(hb[:OptionHeaderSize-2])
	serverWaitHandshakes(t, s, 2)

	c := serverTestDial(t, path) // pushes a out
	c.negotiate("", false, false)
	serverHealthCheck(t, c, 1)
	d := serverTestDial(t, path) // takes the place c left; b stays
	d.read(18)
	serverWaitHandshakes(t, s, 2)

	a.write(hb[OptionHeaderSize-2:])
	r := a.readReply()
	if r.opt != OptList || r.typ != RepErrShutdown || !strings.Contains(string(r.data), "pushed out") {
		t.Fatalf("pushed-out handshake's option: %v %v %q, want ERR_SHUTDOWN saying it was pushed out", r.opt, r.typ, r.data)
	}
	if rs := a.opt(OptAbort, nil); rs[0].typ != RepAck {
		t.Fatalf("ABORT: %v, want ACK", rs[0].typ)
	}
	if _, err := a.nc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after ABORT: %v, want EOF", err)
	}
	if rs := b.opt(OptList, nil); rs[len(rs)-1].typ != RepAck {
		t.Fatalf("the handshake the goodbye should not have pushed out: %v", rs[len(rs)-1].typ)
	}
}

// A pushed-out handshake that says nothing more is dropped within the
// grace period.
func TestServerPushedOutSilentHandshakeDropped(t *testing.T) {
	s := &Server{MaxHandshakes: 1, Exports: []Export{{Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	a := serverTestDial(t, path)
	a.hello(ClientFixedNewstyle | ClientNoZeroes)
	serverWaitHandshakes(t, s, 1)
	start := time.Now()
	serverTestDial(t, path).negotiate("", false, false)
	a.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := a.nc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("silent pushed-out handshake: %v, want EOF", err)
	}
	if took := time.Since(start); took > serverShutdownOptionGrace+time.Second {
		t.Fatalf("dropped after %v, want within %v", took, serverShutdownOptionGrace)
	}
	serverWaitConns(t, s, 1)
}

// serverWaitHandshakes waits until s counts want connections in their
// handshake.
func serverWaitHandshakes(t *testing.T, s *Server, want int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := len(s.handshaking)
		s.mu.Unlock()
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d handshakes, want %d", n, want)
		}
	}
}
