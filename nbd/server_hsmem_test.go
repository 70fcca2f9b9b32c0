package nbd

import (
	"context"
	"testing"
	"time"
)

// The Server's doc bounds a handshake at 8 KiB between options. One
// option with 64 KiB of data (serverMaxOptionData) used to leave c.opt at
// 64 KiB for the rest of the connection, handshake and session: 100
// handshakes that had each sent one held 65 KiB each.
func TestServerHandshakeMemoryAfterLargeOption(t *testing.T) {
	s := &Server{Exports: []Export{{Name: "", Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	const n = 100
	before := serverHeapBytes()
	var cs []*serverRawClient
	for range n {
		c := serverTestDial(t, path)
		c.hello(ClientFixedNewstyle | ClientNoZeroes)
		rs := c.opt(OptionCode(99), make([]byte, 64<<10))
		if rs[0].typ != RepErrUnsup {
			t.Fatalf("reply %v", rs[0].typ)
		}
		cs = append(cs, c)
	}
	after := serverHeapBytes()
	per := (after - before) / n
	t.Logf("%d handshakes hold %d KiB of heap, %d bytes each", n, (after-before)>>10, per)
	if per > 8<<10 {
		t.Errorf("a handshake holds %d KiB after a 64 KiB option, the documented bound is 8 KiB", per>>10)
	}
	// Still answered after: the option buffer is not needed again.
	if rs := cs[0].opt(OptStructuredReply, nil); rs[0].typ != RepAck {
		t.Errorf("STRUCTURED_REPLY after a large option: %v", rs[0].typ)
	}
}

// A session keeps no handshake buffer, however large the options before
// its GO were.
func TestServerSessionKeepsNoOptionBuffer(t *testing.T) {
	s := &Server{Exports: []Export{{Name: "", Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle | ClientNoZeroes)
	c.opt(OptionCode(99), make([]byte, 4<<10)) // kept size: reused
	c.negotiateAfterHello("")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		s.mu.Lock()
		var sc *serverConn
		for k := range s.conns {
			sc = k
		}
		s.mu.Unlock()
		if sc != nil {
			sc.cmu.Lock()
			st, opt, rep := sc.state, sc.opt, sc.rep
			sc.cmu.Unlock()
			if st == serverStateTransmission {
				if opt != nil || rep != nil {
					t.Errorf("session keeps %d + %d bytes of handshake buffers", cap(opt), cap(rep))
				}
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the session never entered transmission")
		}
		time.Sleep(time.Millisecond)
	}
}

// negotiateAfterHello sends GO for name and reads its replies up to ACK.
func (c *serverRawClient) negotiateAfterHello(name string) {
	c.t.Helper()
	rs := c.opt(OptGo, AppendInfoRequest(nil, &InfoRequest{Name: name}))
	if last := rs[len(rs)-1]; last.typ != RepAck {
		c.t.Fatalf("GO: %v %q", last.typ, last.data)
	}
}

// A client that announces an option of 64 KiB and stalls after 1 KiB of
// it holds about what it has sent, not the 64 KiB it announced.
func TestServerStalledLargeOptionHoldsWhatWasSent(t *testing.T) {
	s := &Server{Exports: []Export{{Name: "", Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	const n = 100
	before := serverHeapBytes()
	for range n {
		c := serverTestDial(t, path)
		c.hello(ClientFixedNewstyle | ClientNoZeroes)
		h := OptionHeader{Option: OptionCode(99), Length: 64 << 10}
		var b [OptionHeaderSize]byte
		h.Put(&b)
		c.write(append(b[:], make([]byte, 1<<10)...))
	}
	// A full handshake of one more client gives the server's goroutines
	// time to read what the others sent. Not a proof that they have: a
	// server that had not would hold less, so this can only weaken the
	// check against a regression, never fail a correct server.
	last := serverTestDial(t, path)
	last.negotiate("", false, false)
	after := serverHeapBytes()
	per := (after - before) / n
	t.Logf("%d stalled options hold %d KiB of heap, %d bytes each", n, (after-before)>>10, per)
	if per > 8<<10 {
		t.Errorf("a handshake stalled 1 KiB into a 64 KiB option holds %d KiB", per>>10)
	}
}
