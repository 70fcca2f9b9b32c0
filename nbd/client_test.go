package nbd

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The handshake bytes the client sends, checked against proto.md.
func TestClientHandshakeBytes(t *testing.T) {
	var sawGo, sawSR, sawMeta []byte
	c, err := clientScripted(t, func(p *clientPeer) {
		if cf := p.greet(HandshakeFixedNewstyle | HandshakeNoZeroes); cf != ClientFixedNewstyle|ClientNoZeroes {
			t.Errorf("client flags %#x", cf)
		}
		sawSR = p.expect(OptStructuredReply)
		p.reply(OptStructuredReply, RepAck, nil)
		sawMeta = p.expect(OptSetMetaContext)
		p.reply(OptSetMetaContext, RepMetaContext, AppendMetaContextReply(nil, 3, MetaContextBaseAllocation))
		p.reply(OptSetMetaContext, RepAck, nil)
		sawGo = p.expect(OptGo)
		p.reply(OptGo, RepInfo, AppendInfoExport(nil, 4096, ExportHasFlags|ExportSendFlush))
		p.reply(OptGo, RepInfo, AppendInfoString(nil, InfoName, "disk"))
		p.reply(OptGo, RepInfo, AppendInfoString(nil, InfoDescription, "a disk"))
		p.reply(OptGo, RepInfo, []byte{0x99, 0x99, 1, 2, 3}) // unknown: ignored
		p.reply(OptGo, RepAck, nil)
		r, _ := p.request()
		if r.Type != CmdDisc {
			t.Errorf("after Close got %v, want DISC", r.Type)
		}
	}, WithExportName("disk"))
	if err != nil {
		t.Fatal(err)
	}
	if len(sawSR) != 0 {
		t.Errorf("STRUCTURED_REPLY with data % x", sawSR)
	}
	wantMeta := []byte{0, 0, 0, 4, 'd', 'i', 's', 'k', 0, 0, 0, 1, 0, 0, 0, 15}
	wantMeta = append(wantMeta, MetaContextBaseAllocation...)
	if !bytes.Equal(sawMeta, wantMeta) {
		t.Errorf("SET_META_CONTEXT data\n got % x\nwant % x", sawMeta, wantMeta)
	}
	// u32 name length, name, u16 count, the info requests.
	wantGo := []byte{0, 0, 0, 4, 'd', 'i', 's', 'k', 0, 4, 0, 0, 0, 3, 0, 1, 0, 2}
	if !bytes.Equal(sawGo, wantGo) {
		t.Errorf("GO data\n got % x\nwant % x", sawGo, wantGo)
	}
	want := ExportInfo{Size: 4096, Flags: ExportHasFlags | ExportSendFlush, Name: "disk", Description: "a disk"}
	if diff := cmp.Diff(want, c.Export()); diff != "" {
		t.Errorf("Export (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]MetaContext{{3, MetaContextBaseAllocation}}, c.MetaContexts()); diff != "" {
		t.Error(diff)
	}
	c.Close()
}

func TestClientExportNameFallback(t *testing.T) {
	for _, noZeroes := range []bool{false, true} {
		c, err := clientScripted(t, func(p *clientPeer) {
			hf := HandshakeFixedNewstyle
			if noZeroes {
				hf |= HandshakeNoZeroes
			}
			p.greet(hf)
			p.expect(OptStructuredReply)
			p.reply(OptStructuredReply, RepErrUnsup, nil)
			p.expect(OptGo)
			p.reply(OptGo, RepErrUnsup, []byte("no GO here"))
			if name := p.expect(OptExportName); string(name) != "x" {
				t.Errorf("EXPORT_NAME %q", name)
			}
			p.write(p.u64(8192), p.u16(uint16(ExportHasFlags|ExportReadOnly)))
			if !noZeroes {
				p.write(make([]byte, ExportNameZeroes))
			}
			r, _ := p.request()
			p.simple(r.Cookie, 0, bytes.Repeat([]byte{5}, int(r.Length)))
		}, WithExportName("x"))
		if err != nil {
			t.Fatal(err)
		}
		if c.Size() != 8192 || !c.Flags().Has(ExportReadOnly) || c.StructuredReplies() {
			t.Fatalf("size %d flags %v sr %v", c.Size(), c.Flags(), c.StructuredReplies())
		}
		buf := make([]byte, 512)
		if _, err := c.ReadAt(buf, 0); err != nil || buf[511] != 5 {
			t.Fatalf("ReadAt: %v %v", err, buf[511])
		}
		if _, err := c.WriteAt(buf, 0); !errors.Is(err, ErrReadOnly) || !errors.Is(err, syscall.EPERM) {
			t.Fatalf("write to read-only: %v", err)
		}
	}
}

func TestClientPlainNewstyle(t *testing.T) {
	c, err := clientScripted(t, func(p *clientPeer) {
		if cf := p.greet(0); cf != 0 {
			t.Errorf("client flags %#x to a plain newstyle server", cf)
		}
		p.expect(OptExportName)
		p.write(p.u64(4096), p.u16(uint16(ExportHasFlags)), make([]byte, ExportNameZeroes))
		p.request()
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Handshake() != StyleNewstyle {
		t.Fatal(c.Handshake())
	}
	// No SEND_FLUSH: Flush has nothing to do and sends nothing.
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Trim(context.Background(), 0, 512); !errors.Is(err, ErrNotAdvertised) {
		t.Fatalf("Trim: %v", err)
	}
}

func TestClientOldstyle(t *testing.T) {
	c, err := clientScripted(t, func(p *clientPeer) {
		p.write(p.u64(MagicNBD), p.u64(MagicOldstyle), p.u64(1<<20), p.u32(uint32(ExportHasFlags|ExportSendFlush)), make([]byte, 124))
		r, _ := p.request()
		p.simple(r.Cookie, 0, make([]byte, r.Length))
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Handshake() != StyleOldstyle || c.Size() != 1<<20 {
		t.Fatal(c.Handshake(), c.Size())
	}
	if _, err := c.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
}

func TestClientOptionErrorsTyped(t *testing.T) {
	for rep, want := range optionErrorSentinels {
		if rep == RepErrUnsup {
			continue // GO's ERR_UNSUP means: fall back to EXPORT_NAME
		}
		_, err := clientScripted(t, func(p *clientPeer) {
			p.greet(HandshakeFixedNewstyle)
			p.expect(OptStructuredReply)
			p.reply(OptStructuredReply, RepAck, nil)
			p.expect(OptSetMetaContext)
			p.reply(OptSetMetaContext, RepAck, nil)
			p.expect(OptGo)
			p.reply(OptGo, rep, []byte("why"))
			p.hangup()
		})
		if !errors.Is(err, want) {
			t.Errorf("GO answered %v: got %v, want %v", rep, err, want)
		}
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Message != "why" || oe.Option != OptGo {
			t.Errorf("GO answered %v: %#v", rep, err)
		}
	}
}

func TestClientTLSNoDowngrade(t *testing.T) {
	for _, rep := range []OptionReplyType{RepErrUnsup, RepErrPolicy, RepErrInvalid} {
		_, err := clientScripted(t, func(p *clientPeer) {
			p.greet(HandshakeFixedNewstyle)
			p.expect(OptStartTLS)
			p.reply(OptStartTLS, rep, nil)
			// The client must hang up, not carry on in plaintext.
			b := make([]byte, 1)
			_ = p.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := p.conn.Read(b); n != 0 || err == nil {
				t.Errorf("client sent %x after STARTTLS was refused", b[:n])
			}
		}, WithTLS(&tls.Config{InsecureSkipVerify: true}))
		if !errors.Is(err, ErrTLSUnavailable) {
			t.Errorf("STARTTLS answered %v: %v", rep, err)
		}
	}
	// An oldstyle server cannot do TLS at all.
	_, err := clientScripted(t, func(p *clientPeer) {
		p.write(p.u64(MagicNBD), p.u64(MagicOldstyle), p.u64(1<<20), p.u32(1), make([]byte, 124))
	}, WithTLS(nil))
	if !errors.Is(err, ErrTLSUnavailable) {
		t.Errorf("oldstyle with TLS: %v", err)
	}
}

// Malformed handshakes end in a protocol error, never a panic or hang.
func TestClientHandshakeMalformed(t *testing.T) {
	cases := map[string]func(p *clientPeer){
		"bad magic": func(p *clientPeer) { p.write(p.u64(0x1234), p.u64(MagicIHaveOpt), p.u16(1)) },
		"bad second magic": func(p *clientPeer) {
			p.write(p.u64(MagicNBD), p.u64(0x1234))
		},
		"export without HAS_FLAGS": func(p *clientPeer) {
			p.greet(HandshakeFixedNewstyle)
			p.expect(OptStructuredReply)
			p.reply(OptStructuredReply, RepErrUnsup, nil)
			p.expect(OptGo)
			p.reply(OptGo, RepInfo, AppendInfoExport(nil, 1, ExportSendFlush))
		},
		"info export short": func(p *clientPeer) {
			p.greet(HandshakeFixedNewstyle)
			p.expect(OptStructuredReply)
			p.reply(OptStructuredReply, RepErrUnsup, nil)
			p.expect(OptGo)
			p.reply(OptGo, RepInfo, []byte{0, 0, 1, 2, 3})
		},
		"ack without export": func(p *clientPeer) {
			p.greet(HandshakeFixedNewstyle)
			p.expect(OptStructuredReply)
			p.reply(OptStructuredReply, RepErrUnsup, nil)
			p.expect(OptGo)
			p.reply(OptGo, RepAck, nil)
		},
		"reply to another option": func(p *clientPeer) {
			p.greet(HandshakeFixedNewstyle)
			p.expect(OptStructuredReply)
			p.reply(OptList, RepAck, nil)
		},
		"huge reply length": func(p *clientPeer) {
			p.greet(HandshakeFixedNewstyle)
			p.expect(OptStructuredReply)
			var b [OptionReplySize]byte
			(&OptionReply{Option: OptStructuredReply, Type: RepInfo, Length: 0xffffffff}).Put(&b)
			p.write(b[:])
		},
		"bad option reply magic": func(p *clientPeer) {
			p.greet(HandshakeFixedNewstyle)
			p.expect(OptStructuredReply)
			p.write(make([]byte, OptionReplySize))
		},
		"oldstyle without HAS_FLAGS": func(p *clientPeer) {
			p.write(p.u64(MagicNBD), p.u64(MagicOldstyle), p.u64(1<<20), p.u32(0), make([]byte, 124))
		},
		"duplicate meta context id": func(p *clientPeer) {
			p.greet(HandshakeFixedNewstyle)
			p.expect(OptStructuredReply)
			p.reply(OptStructuredReply, RepAck, nil)
			p.expect(OptSetMetaContext)
			p.reply(OptSetMetaContext, RepMetaContext, AppendMetaContextReply(nil, 1, "a"))
			p.reply(OptSetMetaContext, RepMetaContext, AppendMetaContextReply(nil, 1, "b"))
		},
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := clientScripted(t, script)
			if !clientIsProto(err) {
				t.Fatalf("got %v, want a protocol error", err)
			}
		})
	}
	_, err := clientScripted(t, func(p *clientPeer) { p.write(p.u64(MagicNBD)) })
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("hang-up in the greeting: %v", err)
	}
}

// Replies arrive in any order and chunks of different requests interleave.
func TestClientReorderedInterleaved(t *testing.T) {
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(clientDefaultScript())
		r1, _ := p.request()
		r2, _ := p.request()
		if r1.Offset != 0 {
			r1, r2 = r2, r1 // r1 is the read at 0, whichever came first
		}
		// r2's first half, r1 whole (data + hole), r2's second half.
		p.chunk(r2.Cookie, 0, ChunkOffsetData, p.u64(r2.Offset), bytes.Repeat([]byte{2}, 256))
		p.chunk(r1.Cookie, 0, ChunkOffsetHole, p.u64(r1.Offset+256), p.u32(256))
		p.chunk(r1.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(r1.Offset), bytes.Repeat([]byte{1}, 256))
		p.chunk(r2.Cookie, 0, ChunkOffsetData, p.u64(r2.Offset+256), bytes.Repeat([]byte{3}, 256))
		p.chunk(r2.Cookie, ReplyFlagDone, ChunkNone)
		p.request()
	})
	if err != nil {
		t.Fatal(err)
	}
	b1 := bytes.Repeat([]byte{0xff}, 512)
	b2 := make([]byte, 512)
	e1 := clientAsync(func() error { _, err := c.ReadAt(b1, 0); return err })
	time.Sleep(20 * time.Millisecond) // r1 goes out first
	e2 := clientAsync(func() error { _, err := c.ReadAt(b2, 4096); return err })
	if err := clientWaitErr(t, e1); err != nil {
		t.Fatal(err)
	}
	if err := clientWaitErr(t, e2); err != nil {
		t.Fatal(err)
	}
	want1 := append(bytes.Repeat([]byte{1}, 256), make([]byte, 256)...)
	want2 := append(bytes.Repeat([]byte{2}, 256), bytes.Repeat([]byte{3}, 256)...)
	if !bytes.Equal(b1, want1) || !bytes.Equal(b2, want2) {
		t.Fatalf("reads:\n%v\n%v", b1, b2)
	}
}

// An error chunk fails the request but the client reads on to DONE, and the
// connection stays good.
func TestClientErrorChunks(t *testing.T) {
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(clientDefaultScript())
		r, _ := p.request()
		p.chunk(r.Cookie, 0, ChunkOffsetData, p.u64(r.Offset), bytes.Repeat([]byte{9}, 100))
		p.chunk(r.Cookie, 0, ChunkErrorOffset, p.u32(uint32(EIO)), p.u16(3), []byte("bad"), p.u64(r.Offset+200))
		p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(r.Offset+100), bytes.Repeat([]byte{9}, 100))
		r, _ = p.request()
		p.chunk(r.Cookie, ReplyFlagDone, ChunkType(0x8123), p.u32(uint32(ENOSPC)), p.u16(0))
		r, _ = p.request()
		p.chunk(r.Cookie, ReplyFlagDone, ChunkError, p.u32(4242), p.u16(0))
		r, _ = p.request()
		p.simple(r.Cookie, EPERM, nil)
		r, _ = p.request()
		p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(r.Offset), make([]byte, r.Length))
		p.request()
	})
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{0xff}, 300)
	_, err = c.ReadAt(buf, 1000)
	var se *ServerError
	if !errors.Is(err, syscall.EIO) || !errors.As(err, &se) || se.Message != "bad" || !se.HasOffset || se.Offset != 1200 {
		t.Fatalf("error chunk: %#v", err)
	}
	if !bytes.Equal(buf, make([]byte, 300)) {
		t.Fatal("failed read left data in the buffer")
	}
	if _, err := c.ReadAt(buf, 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("unknown error chunk type: %v", err)
	}
	if _, err := c.ReadAt(buf, 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("unknown errno: %v", err)
	}
	if err := c.Flush(context.Background()); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("simple error reply: %v", err)
	}
	if _, err := c.ReadAt(buf, 0); err != nil {
		t.Fatalf("connection broken after error replies: %v", err)
	}
}

// Each broken reply ends the request, and if the stream cannot be trusted,
// the connection: every waiting request fails at once and later calls fail
// at once.
func TestClientHostileReplies(t *testing.T) {
	type tc struct {
		reply    func(p *clientPeer, r Request)
		connDies bool
	}
	cases := map[string]tc{
		"bad magic":             {func(p *clientPeer, r Request) { p.write(p.u32(0xdeadbeef), make([]byte, 12)) }, true},
		"unknown cookie simple": {func(p *clientPeer, r Request) { p.simple(r.Cookie^0x5555, 0, nil) }, true},
		"unknown cookie chunk": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie+1<<40, ReplyFlagDone, ChunkNone)
		}, true},
		"simple data reply after SR": {func(p *clientPeer, r Request) { p.simple(r.Cookie, 0, make([]byte, r.Length)) }, true},
		"chunk outside the request": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(r.Offset+uint64(r.Length)), []byte{1})
		}, false},
		"chunk before the request": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(r.Offset-1), []byte{1})
		}, false},
		"data longer than the request": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(r.Offset), make([]byte, r.Length+1))
		}, true},
		"overlapping chunks": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, 0, ChunkOffsetData, p.u64(r.Offset), make([]byte, r.Length))
			p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetHole, p.u64(r.Offset+10), p.u32(10))
		}, false},
		"missing data before DONE": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(r.Offset), make([]byte, r.Length-1))
		}, false},
		"DONE with nothing": {func(p *clientPeer, r Request) { p.chunk(r.Cookie, ReplyFlagDone, ChunkNone) }, false},
		"hole of bad length": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetHole, p.u64(r.Offset), p.u32(r.Length), []byte{0})
		}, true},
		"hole of size 0": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetHole, p.u64(r.Offset), p.u32(0))
		}, false},
		"error message past the chunk": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkError, p.u32(uint32(EIO)), p.u16(100), []byte("short"))
		}, false},
		"error value 0": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkError, p.u32(0), p.u16(0))
		}, false},
		"error offset outside": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkErrorOffset, p.u32(5), p.u16(0), p.u64(0))
		}, false},
		"huge error chunk": {func(p *clientPeer, r Request) {
			var b [ChunkHeaderSize]byte
			(&ChunkHeader{Flags: ReplyFlagDone, Type: ChunkError, Cookie: r.Cookie, Length: 1 << 30}).Put(&b)
			p.write(b[:])
		}, true},
		"unknown non-error chunk": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkType(77), []byte{1, 2})
		}, true},
		"NONE with a payload": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkNone, []byte{1})
		}, true},
		"block status chunk to READ": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, ReplyFlagDone, ChunkBlockStatus, p.u32(7), p.u32(r.Length), p.u32(0))
		}, true},
		"hang-up mid-reply": {func(p *clientPeer, r Request) {
			p.chunk(r.Cookie, 0, ChunkOffsetData, p.u64(r.Offset), make([]byte, r.Length/2))
			p.write(p.u32(MagicStructuredReply), []byte{0, 1})
			p.conn.Close()
		}, true},
	}
	for name, k := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := clientScripted(t, func(p *clientPeer) {
				p.handshake(clientDefaultScript())
				r, _ := p.request() // a bystander, never answered unless the connection lives
				r2, _ := p.request()
				k.reply(p, r2)
				if !k.connDies {
					p.simple(r.Cookie, 0, nil) // illegal for READ, so the client dies here
				}
				p.hangup()
			})
			if err != nil {
				t.Fatal(err)
			}
			bystander := clientAsync(func() error { _, err := c.ReadAt(make([]byte, 512), 0); return err })
			time.Sleep(20 * time.Millisecond)
			buf := bytes.Repeat([]byte{0xee}, 512)
			err = clientWaitErr(t, clientAsync(func() error { _, err := c.ReadAt(buf, 8192); return err }))
			if err == nil {
				t.Fatal("hostile reply accepted")
			}
			if !bytes.Equal(buf, make([]byte, 512)) {
				t.Fatal("buffer not zeroed after the failure")
			}
			berr := clientWaitErr(t, bystander)
			if berr == nil {
				t.Fatal("bystander succeeded")
			}
			start := time.Now()
			if _, err := c.ReadAt(make([]byte, 512), 0); err == nil || time.Since(start) > time.Second {
				t.Fatalf("call after the connection died: %v in %v", err, time.Since(start))
			}
			t.Logf("request: %v; bystander: %v", err, berr)
		})
	}
}

func TestClientBlockStatus(t *testing.T) {
	cfg := clientDefaultScript()
	cfg.contexts = []MetaContext{{ID: 7, Name: MetaContextBaseAllocation}, {ID: 9, Name: "qemu:dirty-bitmap:b"}}
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(cfg)
		r, _ := p.request()
		if r.Type != CmdBlockStatus || r.Offset != 4096 || r.Length != 1<<16 {
			t.Errorf("request %+v", r)
		}
		p.chunk(r.Cookie, 0, ChunkBlockStatus, AppendBlockStatus(nil, 9, []Extent{{1 << 16, 1}}))
		p.chunk(r.Cookie, ReplyFlagDone, ChunkBlockStatus, AppendBlockStatus(nil, 7, []Extent{{4096, ExtentHole | ExtentZero}, {1 << 20, 0}}))
		// REQ_ONE answered with two extents: request fails.
		r, _ = p.request()
		if !r.Flags.Has(FlagReqOne) {
			t.Errorf("flags %v", r.Flags)
		}
		p.chunk(r.Cookie, ReplyFlagDone, ChunkBlockStatus, AppendBlockStatus(nil, 7, []Extent{{512, 0}, {512, 0}}))
		// Unknown context id.
		r, _ = p.request()
		p.chunk(r.Cookie, ReplyFlagDone, ChunkBlockStatus, AppendBlockStatus(nil, 8, []Extent{{512, 0}}))
		// Zero-length extent.
		r, _ = p.request()
		p.chunk(r.Cookie, ReplyFlagDone, ChunkBlockStatus, p.u32(7), p.u32(0), p.u32(0))
		// Walk: two requests.
		r, _ = p.request()
		p.chunk(r.Cookie, ReplyFlagDone, ChunkBlockStatus, AppendBlockStatus(nil, 9, []Extent{{1024, 1}}))
		r, _ = p.request()
		if r.Offset != 1024 {
			t.Errorf("walk's second request at %d", r.Offset)
		}
		p.chunk(r.Cookie, ReplyFlagDone, ChunkBlockStatus, AppendBlockStatus(nil, 9, []Extent{{8192, 0}}))
		p.request()
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ext, err := c.BlockStatus(ctx, 4096, 1<<16, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Extent{{4096, ExtentHole | ExtentZero}, {1<<16 - 4096, 0}}, ext); diff != "" {
		t.Fatalf("BlockStatus (-want +got):\n%s", diff)
	}
	err = c.BlockStatusFlags(ctx, 0, 1024, FlagReqOne, func(MetaContext, []Extent) error { return nil })
	if !clientIsProto(err) {
		t.Fatalf("REQ_ONE with two extents: %v", err)
	}
	if _, err := c.BlockStatus(ctx, 0, 1024, nil); !clientIsProto(err) {
		t.Fatalf("unknown context id: %v", err)
	}
	if _, err := c.BlockStatus(ctx, 0, 1024, nil); !clientIsProto(err) {
		t.Fatalf("zero-length extent: %v", err)
	}
	var walked []Extent
	var offs []int64
	err = c.WalkExtents(ctx, "qemu:dirty-bitmap:b", 0, 2048, func(off int64, e Extent) error {
		offs = append(offs, off)
		walked = append(walked, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Extent{{1024, 1}, {1024, 0}}, walked); diff != "" || offs[1] != 1024 {
		t.Fatalf("walk (-want +got):\n%s %v", diff, offs)
	}
}

// Features the server did not advertise are refused locally, never sent.
func TestClientLocalRefusal(t *testing.T) {
	cfg := clientDefaultScript()
	cfg.flags = ExportHasFlags
	cfg.blockSize = [3]uint32{512, 4096, 1 << 16}
	sent := make(chan Request, 100)
	scriptDone := make(chan struct{})
	c, err := clientScripted(t, func(p *clientPeer) {
		defer close(scriptDone)
		p.handshake(cfg)
		for {
			r, _ := p.request()
			sent <- r
			if r.Type == CmdDisc {
				return
			}
			p.chunk(r.Cookie, ReplyFlagDone, ChunkNone)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	buf := make([]byte, 4096)
	checks := []struct {
		name string
		err  error
		want error
	}{
		{"trim", c.Trim(ctx, 0, 4096), ErrNotAdvertised},
		{"zeroes", c.WriteZeroes(ctx, 0, 4096, 0), ErrNotAdvertised},
		{"cache", c.Cache(ctx, 0, 4096), ErrNotAdvertised},
		{"fua", c.Pwrite(ctx, buf, 0, FlagFUA), ErrNotAdvertised},
		{"df", c.Pread(ctx, buf, 0, FlagDF), ErrNotAdvertised},
		{"bad flag", c.Pread(ctx, buf, 0, FlagNoHole), nil},
		{"unaligned", c.Pread(ctx, buf[:100], 0, 0), ErrUnaligned},
		{"unaligned off", c.Pread(ctx, buf, 100, 0), ErrUnaligned},
		{"past end", c.Pread(ctx, buf, 1<<20, 0), ErrOutOfRange},
		{"negative", c.Pread(ctx, buf, -512, 0), ErrOutOfRange},
	}
	for _, k := range checks {
		if k.err == nil || (k.want != nil && !errors.Is(k.err, k.want)) {
			t.Errorf("%s: %v, want %v", k.name, k.err, k.want)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("Flush without SEND_FLUSH: %v", err)
	}
	if mn, pr, mx := c.BlockSize(); mn != 512 || pr != 4096 || mx != 1<<16 {
		t.Fatalf("BlockSize %d %d %d", mn, pr, mx)
	}
	c.Close()
	<-scriptDone
	var got []Command
	for len(sent) > 0 {
		got = append(got, (<-sent).Type)
	}
	if diff := cmp.Diff([]Command{CmdDisc}, got); diff != "" {
		t.Fatalf("requests sent (-want +got):\n%s", diff)
	}
	if err := c.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// Reads and writes longer than the maximum payload are split on minimum
// block boundaries, and every part is within the maximum.
func TestClientSplit(t *testing.T) {
	cfg := clientDefaultScript()
	cfg.blockSize = [3]uint32{512, 4096, 3 * 4096}
	disk := make([]byte, cfg.size)
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(cfg)
		for {
			r, data := p.request()
			if r.Length > 3*4096 || r.Offset%512 != 0 || r.Length%512 != 0 {
				t.Errorf("request %+v breaks the limits", r)
			}
			switch r.Type {
			case CmdWrite:
				copy(disk[r.Offset:], data)
				p.simple(r.Cookie, 0, nil)
			case CmdRead:
				p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(r.Offset), disk[r.Offset:r.Offset+uint64(r.Length)])
			default:
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	w := make([]byte, 100*512)
	for i := range w {
		w[i] = byte(i * 7)
	}
	if _, err := c.WriteAt(w, 512); err != nil {
		t.Fatal(err)
	}
	r := make([]byte, len(w))
	if _, err := c.ReadAt(r, 512); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r, w) {
		t.Fatal("split read/write mismatch")
	}
}

// No more than WithMaxInFlight requests are sent; the rest wait, and a
// waiting call honours its context.
func TestClientBackpressureAndCancel(t *testing.T) {
	release := make(chan struct{})
	got := make(chan Request, 10)
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(clientDefaultScript())
		a, _ := p.request()
		got <- a
		b, _ := p.request()
		got <- b
		<-release
		// Answer the abandoned request late: the client must discard it.
		p.chunk(a.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(a.Offset), bytes.Repeat([]byte{1}, int(a.Length)))
		p.chunk(b.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(b.Offset), bytes.Repeat([]byte{2}, int(b.Length)))
		r, _ := p.request()
		got <- r
		p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetHole, p.u64(r.Offset), p.u32(r.Length))
		p.request()
	}, WithMaxInFlight(2))
	if err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	bufA := bytes.Repeat([]byte{0xaa}, 512)
	ea := clientAsync(func() error { return c.Pread(ctxA, bufA, 0, 0) })
	<-got
	bufB := make([]byte, 512)
	eb := clientAsync(func() error { return c.Pread(context.Background(), bufB, 512, 0) })
	<-got
	// A third call finds no slot: it waits, and gives up with its context.
	ctx3, cancel3 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel3()
	if err := c.Pread(ctx3, make([]byte, 512), 1024, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third call: %v", err)
	}
	select {
	case r := <-got:
		t.Fatalf("third request sent past the in-flight bound: %+v", r)
	default:
	}
	cancelA()
	if err := clientWaitErr(t, ea); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	if !bytes.Equal(bufA, make([]byte, 512)) {
		t.Fatal("cancelled read's buffer not zeroed")
	}
	close(release)
	if err := clientWaitErr(t, eb); err != nil || bufB[0] != 2 {
		t.Fatalf("second call: %v %v", err, bufB[0])
	}
	if !bytes.Equal(bufA, make([]byte, 512)) {
		t.Fatal("late reply written into an abandoned buffer")
	}
	// The abandoned slot came back: a new request goes through.
	buf := bytes.Repeat([]byte{3}, 512)
	if err := c.Pread(context.Background(), buf, 0, 0); err != nil || buf[0] != 0 {
		t.Fatalf("after the late reply: %v", err)
	}
}

// Close fails requests in flight at once with ErrClosed.
func TestClientCloseInFlight(t *testing.T) {
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(clientDefaultScript())
		p.hangup() // the request and DISC, if they come
	})
	if err != nil {
		t.Fatal(err)
	}
	e := clientAsync(func() error { _, err := c.ReadAt(make([]byte, 512), 0); return err })
	time.Sleep(20 * time.Millisecond)
	c.Close()
	if err := clientWaitErr(t, e); !errors.Is(err, ErrClosed) {
		t.Fatalf("in flight at Close: %v", err)
	}
	if _, err := c.WriteAt(make([]byte, 512), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestClientCommandsOnWire(t *testing.T) {
	type seen struct {
		Type   Command
		Flags  CmdFlags
		Offset uint64
		Length uint32
	}
	var got []seen
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(clientDefaultScript())
		for {
			r, data := p.request()
			if r.Type == CmdDisc {
				return
			}
			if r.Type == CmdWrite && len(data) != int(r.Length) {
				t.Errorf("write payload %d bytes", len(data))
			}
			got = append(got, seen{r.Type, r.Flags, r.Offset, r.Length})
			p.simple(r.Cookie, 0, nil)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	buf := make([]byte, 1024)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Pwrite(ctx, buf, 512, FlagFUA))
	_, err = c.WriteAtFUA(buf, 2048)
	must(err)
	must(c.TrimFlags(ctx, 0, 4096, FlagFUA))
	must(c.WriteZeroes(ctx, 4096, 4096, FlagNoHole|FlagFastZero))
	must(c.Cache(ctx, 0, 8192))
	must(c.Flush(ctx))
	c.Close()
	want := []seen{
		{CmdWrite, FlagFUA, 512, 1024},
		{CmdWrite, FlagFUA, 2048, 1024},
		{CmdTrim, FlagFUA, 0, 4096},
		{CmdWriteZeroes, FlagNoHole | FlagFastZero, 4096, 4096},
		{CmdCache, 0, 0, 8192},
		{CmdFlush, 0, 0, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("requests (-want +got):\n%s", diff)
	}
}

func TestClientNegotiatorList(t *testing.T) {
	cs := clientPipePair(t, func(p *clientPeer) {
		p.greet(HandshakeFixedNewstyle)
		p.expect(OptList)
		p.reply(OptList, RepServer, AppendServerReply(nil, "a", "first"))
		p.reply(OptList, RepServer, AppendServerReply(nil, "b", ""))
		p.reply(OptList, RepAck, nil)
		data := p.expect(OptListMetaContext)
		q, err := ParseMetaContextRequest(data)
		if err != nil || q.Export != "a" || len(q.Queries) != 1 || q.Queries[0] != "base:" {
			t.Errorf("LIST_META_CONTEXT %+v %v", q, err)
		}
		p.reply(OptListMetaContext, RepMetaContext, AppendMetaContextReply(nil, 0, MetaContextBaseAllocation))
		p.reply(OptListMetaContext, RepAck, nil)
		p.expect(OptInfo)
		p.reply(OptInfo, RepInfo, AppendInfoExport(nil, 512, ExportHasFlags))
		p.reply(OptInfo, RepInfo, AppendInfoBlockSize(nil, 1, 4096, 1<<20))
		p.reply(OptInfo, RepAck, nil)
		p.expect(OptAbort)
		p.reply(OptAbort, RepAck, nil)
	})
	ctx := context.Background()
	n, err := Negotiate(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	l, err := n.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]ExportEntry{{"a", "first"}, {"b", ""}}, l); diff != "" {
		t.Fatal(diff)
	}
	m, err := n.ListMetaContexts(ctx, "a", "base:")
	if err != nil || len(m) != 1 || m[0].Name != MetaContextBaseAllocation {
		t.Fatalf("ListMetaContexts %v %v", m, err)
	}
	info, err := n.Info(ctx, "a")
	if err != nil || info.Size != 512 || info.MaxPayload != 1<<20 {
		t.Fatalf("Info %+v %v", info, err)
	}
	if err := n.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Go(ctx, "a"); err == nil {
		t.Fatal("Go after Abort succeeded")
	}
}

// clientPipePair runs script on the server end of a pipe and returns the
// client end.
func clientPipePair(t *testing.T, script func(p *clientPeer)) net.Conn {
	t.Helper()
	cs, ss := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(clientPeerDone); !ok {
					panic(r)
				}
			}
			ss.Close()
		}()
		script(&clientPeer{t: t, conn: ss})
	}()
	t.Cleanup(func() { cs.Close(); ss.Close(); <-done })
	return cs
}

func TestClientErrnoStrings(t *testing.T) {
	if s := (&ServerError{Errno: EIO, Message: "disk on fire", HasOffset: true, Offset: 4096}).Error(); !strings.Contains(s, "disk on fire") || !strings.Contains(s, "4096") {
		t.Fatal(s)
	}
}

// Chunks of one READ in any order, adjacent or not, are accepted once each
// and merged; an overlap anywhere is caught.
func TestClientCover(t *testing.T) {
	s := &clientSlot{off: 1000, length: 100}
	for _, r := range [][2]uint64{{1050, 10}, {1000, 10}, {1090, 10}, {1010, 40}, {1060, 30}} {
		if err := s.cover(r[0], r[1]); err != nil {
			t.Fatalf("cover %v: %v", r, err)
		}
	}
	if s.covered != 100 || len(s.ivals) != 1 || s.ivals[0] != (clientIval{1000, 1100}) {
		t.Fatalf("covered %d in %v", s.covered, s.ivals)
	}
	s = &clientSlot{off: 0, length: 100}
	for _, r := range [][2]uint64{{10, 10}, {40, 10}} {
		if err := s.cover(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range [][2]uint64{{15, 1}, {5, 6}, {19, 22}, {0, 101}, {45, 100}, {30, 11}} {
		if err := s.cover(bad[0], bad[1]); !clientIsProto(err) {
			t.Errorf("cover %v accepted over %v", bad, s.ivals)
		}
	}
	// Every other byte first, then the rest: bounded pieces.
	s = &clientSlot{off: 0, length: 1 << 20}
	var err error
	for o := uint64(0); o < 1<<20 && err == nil; o += 2 {
		err = s.cover(o, 1)
	}
	if !clientIsProto(err) || len(s.ivals) > clientMaxFragments {
		t.Fatalf("fragmented reply: %v with %d pieces", err, len(s.ivals))
	}
}

// A write blocked on a server that does not read is ended by its context:
// taken back whole if nothing went out (the connection lives), the
// connection closed if part of it did.
func TestClientCancelBlockedWrite(t *testing.T) {
	for _, partial := range []bool{false, true} {
		resume := make(chan struct{})
		c, err := clientScripted(t, func(p *clientPeer) {
			p.handshake(clientDefaultScript())
			if partial {
				p.read(10) // part of the header, then nothing
			}
			<-resume
			if partial {
				p.hangup()
				return
			}
			r, data := p.request()
			if r.Type != CmdWrite || len(data) != 4096 {
				t.Errorf("after the cancelled write got %v with %d bytes", r.Type, len(data))
			}
			p.simple(r.Cookie, 0, nil)
			p.request()
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err = c.Pwrite(ctx, make([]byte, 1<<20), 0, 0)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("partial=%v: blocked write: %v", partial, err)
		}
		close(resume)
		_, err = c.WriteAt(make([]byte, 4096), 0)
		if partial && err == nil {
			t.Fatal("connection used after half a request went out")
		}
		if !partial && err != nil {
			t.Fatalf("connection lost after a request was taken back whole: %v", err)
		}
	}
}

// Shutdown lets requests in flight finish, then disconnects.
func TestClientShutdown(t *testing.T) {
	got := make(chan struct{})
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(clientDefaultScript())
		r, _ := p.request()
		close(got)
		time.Sleep(50 * time.Millisecond)
		p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(r.Offset), make([]byte, r.Length))
		if d, _ := p.request(); d.Type != CmdDisc {
			t.Errorf("got %v, want DISC", d.Type)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	e := clientAsync(func() error { _, err := c.ReadAt(make([]byte, 512), 0); return err })
	<-got
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := clientWaitErr(t, e); err != nil {
		t.Fatalf("request in flight at Shutdown: %v", err)
	}
	if _, err := c.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Shutdown: %v", err)
	}
}

// Multi-conn through WithDialer: requests are spread over the connections
// and Flush reaches every one of them.
func TestClientMultiConnFlush(t *testing.T) {
	var mu sync.Mutex
	flushes := map[int]int{}
	requests := map[int]int{}
	var wg sync.WaitGroup
	conns := 0
	size := uint64(1 << 20)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		cs, ss := net.Pipe()
		mu.Lock()
		id := conns
		conns++
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(clientPeerDone); !ok {
						panic(r)
					}
				}
				ss.Close()
			}()
			p := &clientPeer{t: t, conn: ss}
			cfg := clientDefaultScript()
			cfg.size = size
			p.handshake(cfg)
			for {
				r, _ := p.request()
				if r.Type == CmdDisc {
					return
				}
				mu.Lock()
				requests[id]++
				if r.Type == CmdFlush {
					flushes[id]++
				}
				mu.Unlock()
				p.simple(r.Cookie, 0, nil)
			}
		})
		return cs, nil
	}
	t.Cleanup(wg.Wait)
	c, err := Dial(context.Background(), "nbd://h/", WithDialer(dial), WithConnections(3))
	if err != nil {
		t.Fatal(err)
	}
	if c.Connections() != 3 {
		t.Fatalf("Connections = %d", c.Connections())
	}
	for i := range 9 {
		if _, err := c.WriteAt(make([]byte, 512), int64(i)*512); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Close()
	mu.Lock()
	for id := range 3 {
		if flushes[id] != 1 || requests[id] != 4 {
			t.Errorf("connection %d: %d requests, %d flushes; want 4 and 1", id, requests[id], flushes[id])
		}
	}
	mu.Unlock()

	// Connections that disagree about the export are refused.
	n := 0
	dial2 := func(ctx context.Context, network, addr string) (net.Conn, error) {
		n++
		if n == 2 {
			size = 2 << 20
		}
		return dial(ctx, network, addr)
	}
	size = 1 << 20
	if _, err := Dial(context.Background(), "nbd://h/", WithDialer(dial2), WithConnections(2)); err == nil {
		t.Fatal("multi-conn with differing sizes accepted")
	}
}

// A handshake that stalls ends with the context's deadline.
func TestClientHandshakeDeadline(t *testing.T) {
	cs := clientPipePair(t, func(p *clientPeer) {
		p.greet(HandshakeFixedNewstyle)
		p.expect(OptStructuredReply)
		p.hangup() // never answers
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := NewClient(ctx, cs)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("stalled handshake: %v after %v", err, time.Since(start))
	}
}

// Local refusals carry the errno a server would answer, so a Client
// re-exported by Server reports them as the protocol expects.
func TestClientRefusalErrno(t *testing.T) {
	cfg := clientDefaultScript()
	cfg.flags = ExportHasFlags | ExportReadOnly
	cfg.blockSize = [3]uint32{512, 4096, 1 << 20}
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(cfg)
		p.request()
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []struct {
		err      error
		sentinel error
		errno    Errno
	}{
		{c.Cache(ctx, 0, 512), ErrNotAdvertised, ENOTSUP},
		{c.Pwrite(ctx, make([]byte, 512), 0, 0), ErrReadOnly, EPERM},
		{c.Pread(ctx, make([]byte, 512), 1<<20, 0), ErrOutOfRange, EINVAL},
		{c.Pread(ctx, make([]byte, 100), 0, 0), ErrUnaligned, EINVAL},
	} {
		if !errors.Is(k.err, k.sentinel) || !errors.Is(k.err, k.errno.Syscall()) || ErrnoOf(k.err) != k.errno {
			t.Errorf("%v: sentinel %v errno %v ErrnoOf %v", k.err, errors.Is(k.err, k.sentinel), errors.Is(k.err, k.errno.Syscall()), ErrnoOf(k.err))
		}
		if strings.Contains(k.err.Error(), "server error") {
			t.Errorf("local refusal reads like a server error: %v", k.err)
		}
	}
}

// A failed dial names the address once and keeps the cause.
func TestClientDialErrorMessage(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	_, err := Dial(context.Background(), "nbd+unix:///?socket="+sock)
	if err == nil {
		t.Fatal("Dial of a missing socket succeeded")
	}
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("error %q does not match ENOENT", err)
	}
	if n := strings.Count(err.Error(), sock); n != 1 {
		t.Errorf("error %q names the socket %d times, want once", err, n)
	}
}

// TestClientAbortsAfterShutdownReply: a server that answers GO with
// NBD_REP_ERR_SHUTDOWN gets NBD_OPT_ABORT from the client before it hangs
// up (proto.md: a client giving up the negotiation says so).
func TestClientAbortsAfterShutdownReply(t *testing.T) {
	aborted := make(chan bool, 1)
	_, err := clientScripted(t, func(p *clientPeer) {
		p.greet(HandshakeFixedNewstyle | HandshakeNoZeroes)
		for {
			o, _ := p.option()
			if o == OptGo {
				p.reply(o, RepErrShutdown, []byte("going down"))
				break
			}
			p.reply(o, RepErrUnsup, nil)
		}
		o, _ := p.option()
		aborted <- o == OptAbort
		p.hangup()
	})
	if !errors.Is(err, ErrOptShutdown) {
		t.Fatalf("GO answered ERR_SHUTDOWN: %v, want ErrOptShutdown", err)
	}
	select {
	case ok := <-aborted:
		if !ok {
			t.Error("the client's next option after ERR_SHUTDOWN was not ABORT")
		}
	case <-time.After(5 * time.Second):
		t.Error("the client sent nothing after ERR_SHUTDOWN")
	}
}
