package nbd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
)

// Hostile clients: arbitrary bytes, clients that vanish mid-request. The
// server must not panic, hang, or allocate beyond its limits, and other
// connections must not notice.

// serverConnCount returns how many connections s serves now.
func serverConnCount(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func serverWaitConns(t *testing.T, s *Server, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for serverConnCount(s) != want {
		if time.Now().After(deadline) {
			t.Fatalf("server has %d connections, want %d", serverConnCount(s), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// serverHealthCheck writes and reads back through c.
func serverHealthCheck(t *testing.T, c *serverRawClient, cookie uint64) {
	t.Helper()
	data := bytes.Repeat([]byte{byte(cookie)}, 4096)
	c.request(CmdWrite, 0, cookie, 8192, 4096, data)
	if r, _ := c.simple(0); r.Error != 0 || r.Cookie != cookie {
		t.Fatalf("healthy client's write: %+v", r)
	}
	c.request(CmdRead, 0, cookie+1, 8192, 4096, nil)
	if r, got := c.simple(4096); r.Error != 0 || !bytes.Equal(got, data) {
		t.Fatalf("healthy client's read: %+v", r)
	}
}

func TestServerClientVanishesMidWrite(t *testing.T) {
	d := NewMemDisk(1 << 20)
	s := &Server{Exports: []Export{{Backend: d}}}
	path := serverTestStart(t, s)
	good := serverTestDial(t, path)
	good.negotiate("", false, false)
	serverHealthCheck(t, good, 10)

	for i, cut := range []int{5, RequestSize, RequestSize + 1000} {
		bad := serverTestDial(t, path)
		bad.negotiate("", i%2 == 0, false)
		var h [RequestSize]byte
		(&Request{Type: CmdWrite, Cookie: 1, Offset: 0, Length: 64 << 10}).Put(&h)
		msg := append(h[:], bytes.Repeat([]byte{0xbd}, 64<<10)...)
		bad.write(msg[:cut])
		bad.nc.Close()
		serverWaitConns(t, s, 1)
		serverHealthCheck(t, good, uint64(20+2*i))
	}
	// Nothing of the torn write reached the disk.
	got := make([]byte, 64<<10)
	d.ReadAt(got, 0)
	if bytes.Contains(got, []byte{0xbd}) {
		t.Fatal("a torn write reached the backend")
	}
}

// fio killed with SIGKILL in the middle of random writes.
func TestServerFioKilledMidRun(t *testing.T) {
	fio := testenv.Need(t, "fio", "fio")
	d := NewMemDisk(16 << 20)
	s := &Server{Exports: []Export{{Backend: d}}}
	path := serverTestStart(t, s)
	good := serverTestDial(t, path)
	good.negotiate("", true, false)

	p := testenv.Start(t, fio, "--name=killme", "--ioengine=nbd", "--uri="+serverTestURI(path, ""),
		"--thread", "--rw=randwrite", "--bs=64k", "--iodepth=16", "--time_based", "--runtime=60", "--size=16m")
	deadline := time.Now().Add(20 * time.Second)
	for d.Allocated() == 0 || serverConnCount(s) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("fio never wrote: %s", p.Output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	p.Kill()
	serverWaitConns(t, s, 1)
	good.request(CmdFlush, 0, 5, 0, 0, nil)
	if s, ch := good.anyReply(); s == nil || s.Error != 0 {
		t.Fatalf("flush after fio died: %+v %+v", s, ch)
	}
}

// serverFuzzHandshake is a valid fixed-newstyle handshake: client flags,
// STRUCTURED_REPLY, SET_META_CONTEXT base:allocation, GO name.
func serverFuzzHandshake(name string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(ClientFixedNewstyle|ClientNoZeroes))
	opt := func(o OptionCode, data []byte) {
		var h [OptionHeaderSize]byte
		(&OptionHeader{Option: o, Length: uint32(len(data))}).Put(&h)
		b = append(append(b, h[:]...), data...)
	}
	opt(OptStructuredReply, nil)
	opt(OptSetMetaContext, AppendMetaContextRequest(nil, &MetaContextRequest{Export: name, Queries: []string{MetaContextBaseAllocation}}))
	opt(OptGo, AppendInfoRequest(nil, &InfoRequest{Name: name}))
	return b
}

// FuzzServerSession plays arbitrary client bytes at a server. If the first
// byte is odd a valid handshake goes first, so most inputs reach the
// transmission phase; if its second bit is set the session runs on a unix
// socket pair rather than net.Pipe (the server then reads and writes the
// descriptor itself and sends reads from the MemDisk's memory). The session must end (no hang) once the client
// closes, allocate within the server's limits, and leave a second,
// well-behaved connection of the same server working.
func FuzzServerSession(f *testing.F) {
	f.Add([]byte{0})
	f.Add(append([]byte{1}, serverFuzzReqs(Request{Type: CmdRead, Length: 512})...))
	lent := append([]byte{3}, serverFuzzReqs(Request{Type: CmdWrite, Offset: 65530, Length: 8})...)
	lent = append(lent, "12345678"...)
	f.Add(append(lent, serverFuzzReqs(Request{Type: CmdRead, Offset: 65500, Length: 100})...))
	base := serverSettledRSS() // once per process: a leak per session adds up
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		in := data[1:]
		if data[0]&1 == 1 {
			in = append(serverFuzzHandshake(""), in...)
		}
		s := &Server{
			MaxPayload:       64 << 10,
			MaxInFlight:      4,
			HandshakeTimeout: 5 * time.Second,
			// The well-behaved client has an export of its own: the hostile
			// one may legitimately overwrite anything it can name.
			Exports: []Export{{Backend: NewMemDisk(1 << 20)}, {Name: "ro", Backend: NewMemDisk(4096), ReadOnly: true},
				{Name: "healthy", Backend: NewMemDisk(1 << 20)}},
		}
		defer s.Close()

		var before runtime.MemStats
		runtime.ReadMemStats(&before)

		// The hostile session.
		var hc, hs net.Conn
		if data[0]&2 != 0 {
			hc, hs = serverTestUnixPair(t)
		} else {
			hc, hs = net.Pipe()
		}
		hostileDone := make(chan error, 1)
		go func() { hostileDone <- s.ServeConn(hs) }()
		go io.Copy(io.Discard, hc)
		hc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		// The write fails once the server hangs up, which is fine; it
		// must not time out: that is a server that stopped reading a
		// connection it still holds open.
		if _, err := hc.Write(in); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("server stopped reading for 5 s without hanging up")
		}
		hc.Close()

		// A good session alongside.
		gc, gs := net.Pipe()
		goodDone := make(chan error, 1)
		go func() { goodDone <- s.ServeConn(gs) }()
		gc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := serverFuzzGood(gc); err != nil {
			t.Fatalf("well-behaved connection failed beside the hostile one: %v", err)
		}
		gc.Close()

		select {
		case <-hostileDone:
		case <-time.After(10 * time.Second):
			t.Fatal("hostile session did not end after the client closed")
		}
		<-goodDone
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		// Slots of 64 KiB payloads x 4, option buffers, disks, goroutines:
		// a few MiB. A server that believed a length would allocate far more.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
			t.Fatalf("session allocated %d bytes", grew)
		}
		// And nothing of it stays resident: run for minutes under
		// -fuzz, a leak per session shows here.
		serverCheckRSS(t, base, serverFuzzRSSLimit)
	})
}

// serverFuzzGood runs a handshake, a write and a read-back on nc.
func serverFuzzGood(nc net.Conn) error {
	var hello [18]byte
	if _, err := io.ReadFull(nc, hello[:]); err != nil {
		return err
	}
	// net.Pipe has no buffer: write from another goroutine, as a socket's
	// buffer would let a pipelining client do.
	werr := make(chan error, 2)
	go func() { _, err := nc.Write(serverFuzzHandshake("healthy")); werr <- err }()
	// Skip option replies up to GO's ACK.
	for {
		var h [OptionReplySize]byte
		if _, err := io.ReadFull(nc, h[:]); err != nil {
			return err
		}
		var r OptionReply
		if err := r.Parse(&h); err != nil {
			return err
		}
		if _, err := io.CopyN(io.Discard, nc, int64(r.Length)); err != nil {
			return err
		}
		if r.Type.IsError() {
			return fmt.Errorf("option %v: %v", r.Option, r.Type)
		}
		if r.Option == OptGo && r.Type == RepAck {
			break
		}
	}
	data := bytes.Repeat([]byte("ok"), 256)
	if err := <-werr; err != nil {
		return err
	}
	// Write, wait for its reply, then read: pipelined, the two could be
	// served in either order.
	var got []byte
	for _, msg := range [][]byte{
		append(serverFuzzReqs(Request{Type: CmdWrite, Cookie: 1, Offset: 512, Length: 512}), data...),
		serverFuzzReqs(Request{Type: CmdRead, Cookie: 2, Offset: 512, Length: 512}),
	} {
		go func() { _, err := nc.Write(msg); werr <- err }()
		var m [4]byte
		if _, err := io.ReadFull(nc, m[:]); err != nil {
			return err
		}
		switch binary.BigEndian.Uint32(m[:]) {
		case MagicSimpleReply:
			var r [12]byte
			if _, err := io.ReadFull(nc, r[:]); err != nil {
				return err
			}
			if e := binary.BigEndian.Uint32(r[:]); e != 0 {
				return Errno(e)
			}
		case MagicStructuredReply:
			var h [16]byte
			if _, err := io.ReadFull(nc, h[:]); err != nil {
				return err
			}
			p := make([]byte, binary.BigEndian.Uint32(h[12:]))
			if _, err := io.ReadFull(nc, p); err != nil {
				return err
			}
			if ChunkType(binary.BigEndian.Uint16(h[2:])) != ChunkOffsetData {
				return fmt.Errorf("chunk type %v", ChunkType(binary.BigEndian.Uint16(h[2:])))
			}
			got = p[8:]
		default:
			return errors.New("bad reply magic")
		}
		if err := <-werr; err != nil {
			return err
		}
	}
	if !bytes.Equal(got, data) {
		return errors.New("read back differs")
	}
	return nil
}

func serverFuzzReqs(rs ...Request) []byte {
	var b []byte
	for _, r := range rs {
		var h [RequestSize]byte
		r.Put(&h)
		b = append(b, h[:]...)
	}
	return b
}
