package nbd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A raw protocol client for the server's tests: it writes and reads the
// exact bytes of proto.md, independent of the package's Client, so the
// server's answers are checked against the spec and not against our own
// client's reading of it.

// serverTestStart serves s on a fresh unix socket and returns its path.
// The server is closed when the test ends.
func serverTestStart(t testing.TB, s *Server) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nbdsrv")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		os.RemoveAll(dir)
	})
	return path
}

type serverRawClient struct {
	t  testing.TB
	nc net.Conn
}

func serverTestDial(t testing.TB, path string) *serverRawClient {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { nc.Close() })
	return &serverRawClient{t: t, nc: nc}
}

func (c *serverRawClient) read(n int) []byte {
	c.t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(c.nc, b); err != nil {
		c.t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

func (c *serverRawClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// hello reads the greeting and answers with client flags.
func (c *serverRawClient) hello(flags ClientFlags) {
	c.t.Helper()
	g := c.read(18)
	want := []byte{'N', 'B', 'D', 'M', 'A', 'G', 'I', 'C', 'I', 'H', 'A', 'V', 'E', 'O', 'P', 'T', 0, 3}
	if !bytes.Equal(g, want) {
		c.t.Fatalf("greeting % x, want % x", g, want)
	}
	c.write(binary.BigEndian.AppendUint32(nil, uint32(flags)))
}

type serverTestReply struct {
	opt  OptionCode
	typ  OptionReplyType
	data []byte
}

func (c *serverRawClient) sendOpt(opt OptionCode, data []byte) {
	c.t.Helper()
	h := OptionHeader{Option: opt, Length: uint32(len(data))}
	var b [OptionHeaderSize]byte
	h.Put(&b)
	c.write(append(b[:], data...))
}

func (c *serverRawClient) readReply() serverTestReply {
	c.t.Helper()
	var r OptionReply
	if err := r.Parse((*[OptionReplySize]byte)(c.read(OptionReplySize))); err != nil {
		c.t.Fatal(err)
	}
	return serverTestReply{r.Option, r.Type, c.read(int(r.Length))}
}

// opt sends an option and reads replies up to the final one (ACK or an
// error).
func (c *serverRawClient) opt(opt OptionCode, data []byte) []serverTestReply {
	c.t.Helper()
	c.sendOpt(opt, data)
	var rs []serverTestReply
	for {
		r := c.readReply()
		if r.opt != opt {
			c.t.Fatalf("reply for option %v, want %v", r.opt, opt)
		}
		rs = append(rs, r)
		if r.typ == RepAck || r.typ.IsError() {
			return rs
		}
	}
}

// negotiate does a full handshake: structured replies and base:allocation
// when asked, then GO on name. It returns the export's info.
func (c *serverRawClient) negotiate(name string, structured, meta bool) ExportInfo {
	c.t.Helper()
	c.hello(ClientFixedNewstyle | ClientNoZeroes)
	if structured {
		if rs := c.opt(OptStructuredReply, nil); rs[0].typ != RepAck {
			c.t.Fatalf("STRUCTURED_REPLY: %v", rs[0].typ)
		}
	}
	if meta {
		rs := c.opt(OptSetMetaContext, AppendMetaContextRequest(nil, &MetaContextRequest{Export: name, Queries: []string{MetaContextBaseAllocation}}))
		if len(rs) != 2 || rs[0].typ != RepMetaContext {
			c.t.Fatalf("SET_META_CONTEXT replies %+v", rs)
		}
	}
	rs := c.opt(OptGo, AppendInfoRequest(nil, &InfoRequest{Name: name, Requests: []InfoType{InfoBlockSize}}))
	var info ExportInfo
	for _, r := range rs {
		switch r.typ {
		case RepInfo:
			if _, err := ParseInfo(r.data, &info); err != nil {
				c.t.Fatal(err)
			}
		case RepAck:
		default:
			c.t.Fatalf("GO: reply %v %q", r.typ, r.data)
		}
	}
	return info
}

func (c *serverRawClient) request(typ Command, flags CmdFlags, cookie, off uint64, length uint32, payload []byte) {
	c.t.Helper()
	r := Request{Flags: flags, Type: typ, Cookie: cookie, Offset: off, Length: length}
	var b [RequestSize]byte
	r.Put(&b)
	c.write(append(b[:], payload...))
}

// simple reads a simple reply with n bytes of data on success.
func (c *serverRawClient) simple(n int) (SimpleReply, []byte) {
	c.t.Helper()
	var r SimpleReply
	if err := r.Parse((*[SimpleReplySize]byte)(c.read(SimpleReplySize))); err != nil {
		c.t.Fatal(err)
	}
	if r.Error != 0 {
		return r, nil
	}
	return r, c.read(n)
}

type serverTestChunk struct {
	ChunkHeader
	payload []byte
}

// anyReply reads one reply message: a simple reply (the caller must not
// expect data) or one chunk.
func (c *serverRawClient) anyReply() (simple *SimpleReply, chunk *serverTestChunk) {
	c.t.Helper()
	m := c.read(4)
	switch binary.BigEndian.Uint32(m) {
	case MagicSimpleReply:
		var r SimpleReply
		if err := r.Parse((*[SimpleReplySize]byte)(append(m, c.read(SimpleReplySize-4)...))); err != nil {
			c.t.Fatal(err)
		}
		return &r, nil
	case MagicStructuredReply:
		var h ChunkHeader
		if err := h.Parse((*[ChunkHeaderSize]byte)(append(m, c.read(ChunkHeaderSize-4)...))); err != nil {
			c.t.Fatal(err)
		}
		return nil, &serverTestChunk{h, c.read(int(h.Length))}
	}
	c.t.Fatalf("reply magic % x", m)
	return nil, nil
}

// chunks reads the chunks of one structured reply, up to DONE.
func (c *serverRawClient) chunks() []serverTestChunk {
	c.t.Helper()
	var cs []serverTestChunk
	for {
		s, ch := c.anyReply()
		if s != nil {
			c.t.Fatalf("simple reply %+v inside a structured reply", *s)
		}
		cs = append(cs, *ch)
		if ch.Flags.Has(ReplyFlagDone) {
			return cs
		}
	}
}

// serverTestAssemble rebuilds a structured read reply of [off, off+n):
// the data, which bytes were holes, and the first error.
func serverTestAssemble(t testing.TB, cs []serverTestChunk, off uint64, n int) (data []byte, holes int, err error) {
	t.Helper()
	data = make([]byte, n)
	seen := make([]bool, n)
	mark := func(o uint64, k int) {
		if o < off || o+uint64(k) > off+uint64(n) || k == 0 {
			t.Fatalf("chunk [%d,+%d) outside the request [%d,+%d)", o, k, off, n)
		}
		for i := range k {
			if seen[int(o-off)+i] {
				t.Fatalf("chunks overlap at %d", o+uint64(i))
			}
			seen[int(o-off)+i] = true
		}
	}
	for _, ch := range cs {
		switch ch.Type {
		case ChunkOffsetData:
			o := binary.BigEndian.Uint64(ch.payload)
			d := ch.payload[8:]
			mark(o, len(d))
			copy(data[o-off:], d)
		case ChunkOffsetHole:
			if len(ch.payload) != OffsetHoleSize {
				t.Fatalf("hole chunk of %d bytes", len(ch.payload))
			}
			o, k := ParseOffsetHole((*[OffsetHoleSize]byte)(ch.payload))
			mark(o, int(k))
			holes += int(k)
		case ChunkNone:
		case ChunkError, ChunkErrorOffset:
			e, perr := ParseErrorChunk(ch.Type, ch.payload)
			if perr != nil {
				t.Fatal(perr)
			}
			if err == nil {
				err = e.Error
			}
		default:
			t.Fatalf("unexpected chunk type %v", ch.Type)
		}
	}
	if err == nil {
		for i, s := range seen {
			if !s {
				t.Fatalf("byte %d of the read not covered by any chunk", i)
			}
		}
	}
	return data, holes, err
}

// serverTestSocket returns a fresh unix socket path, removed at the end.
func serverTestSocket(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nbdsrv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s")
}

// serverTestUnixPair returns the two ends of a connected unix stream
// socket pair, closed at the end of the test.
func serverTestUnixPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
		t.Cleanup(func() { c.Close() })
	}
	return conns[0], conns[1]
}
