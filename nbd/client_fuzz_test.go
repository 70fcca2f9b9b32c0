package nbd

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Fuzz targets that play arbitrary server bytes at the client: from the
// greeting on, and from the first reply of transmission on. The client
// must return (no hang), never panic, and never leave a failed read's
// buffer holding anything but zeroes.

// clientHandshakeBytes makes the byte stream of a fixed newstyle server through
// GO, as the client's default handshake expects it.
func clientHandshakeBytes(cfg clientScriptCfg) []byte {
	var b []byte
	be := binary.BigEndian
	b = be.AppendUint64(b, MagicNBD)
	b = be.AppendUint64(b, MagicIHaveOpt)
	b = be.AppendUint16(b, uint16(HandshakeFixedNewstyle|HandshakeNoZeroes))
	rep := func(o OptionCode, t OptionReplyType, data []byte) {
		var h [OptionReplySize]byte
		(&OptionReply{Option: o, Type: t, Length: uint32(len(data))}).Put(&h)
		b = append(b, h[:]...)
		b = append(b, data...)
	}
	if cfg.structured {
		rep(OptStructuredReply, RepAck, nil)
		for _, m := range cfg.contexts {
			rep(OptSetMetaContext, RepMetaContext, AppendMetaContextReply(nil, m.ID, m.Name))
		}
		rep(OptSetMetaContext, RepAck, nil)
	} else {
		rep(OptStructuredReply, RepErrUnsup, nil)
	}
	rep(OptGo, RepInfo, AppendInfoExport(nil, cfg.size, cfg.flags))
	if cfg.blockSize != [3]uint32{} {
		rep(OptGo, RepInfo, AppendInfoBlockSize(nil, cfg.blockSize[0], cfg.blockSize[1], cfg.blockSize[2]))
	}
	rep(OptGo, RepAck, nil)
	return b
}

func clientHandshakeSeeds() [][]byte {
	full := clientHandshakeBytes(clientDefaultScript())
	plain := clientDefaultScript()
	plain.structured = false
	plain.blockSize = [3]uint32{512, 4096, 1 << 20}
	be := binary.BigEndian
	old := be.AppendUint64(nil, MagicNBD)
	old = be.AppendUint64(old, MagicOldstyle)
	old = be.AppendUint64(old, 1<<20)
	old = be.AppendUint32(old, uint32(ExportHasFlags|ExportSendFlush))
	old = append(old, make([]byte, 124)...)
	newstyle := be.AppendUint64(nil, MagicNBD)
	newstyle = be.AppendUint64(newstyle, MagicIHaveOpt)
	newstyle = be.AppendUint16(newstyle, 0)
	newstyle = be.AppendUint64(newstyle, 4096)
	newstyle = be.AppendUint16(newstyle, uint16(ExportHasFlags))
	newstyle = append(newstyle, make([]byte, 124)...)
	return [][]byte{full, clientHandshakeBytes(plain), old, newstyle, full[:30]}
}

// clientFuzzPeer writes script to the server end of a pipe while draining
// whatever the client sends, then hangs up.
func clientFuzzPeer(ss net.Conn, script []byte) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(io.Discard, ss) })
	wg.Go(func() {
		_ = ss.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = ss.Write(script)
		if cw, ok := ss.(interface{ CloseWrite() error }); ok {
			// A socket: end the script but keep reading what the
			// client sends, as a server that has no more to say.
			_ = cw.CloseWrite()
			return
		}
		ss.Close()
	})
	return &wg
}

func FuzzClientHandshake(f *testing.F) {
	for _, s := range clientHandshakeSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		cs, ss := net.Pipe()
		clientFuzzPlay(t, cs, ss, script, "handshake", func(ctx context.Context) {
			c, err := NewClient(ctx, cs, WithExportName("e"))
			if err == nil {
				if c.Size() < 0 || !c.Flags().Has(ExportHasFlags) {
					t.Errorf("accepted size %d flags %v", c.Size(), c.Flags())
				}
				c.Close()
			}
		})
	})
}

// The transmission fuzz target: after a valid handshake (structured
// replies, base:allocation as context 7), the client sends a 512-byte READ
// at 0 (cookie 1<<32, slot 0) and then a BLOCK_STATUS of 4096 bytes at 0
// (cookie 1<<32|1, slot 1), while the server plays script.
func clientTransmissionSeeds() [][]byte {
	be := binary.BigEndian
	chunk := func(b []byte, cookie uint64, flags ReplyFlags, t ChunkType, payload []byte) []byte {
		var h [ChunkHeaderSize]byte
		(&ChunkHeader{Flags: flags, Type: t, Cookie: cookie, Length: uint32(len(payload))}).Put(&h)
		return append(append(b, h[:]...), payload...)
	}
	const r, s = 1 << 32, 1<<32 | 1
	data := append(be.AppendUint64(nil, 0), bytes.Repeat([]byte{0x5a}, 512)...)
	good := chunk(nil, r, ReplyFlagDone, ChunkOffsetData, data)
	good = chunk(good, s, ReplyFlagDone, ChunkBlockStatus, AppendBlockStatus(nil, 7, []Extent{{4096, ExtentHole | ExtentZero}}))
	split := chunk(nil, r, 0, ChunkOffsetHole, append(be.AppendUint64(nil, 256), 0, 0, 1, 0))
	split = chunk(split, r, 0, ChunkOffsetData, append(be.AppendUint64(nil, 0), make([]byte, 256)...))
	split = chunk(split, r, ReplyFlagDone, ChunkNone, nil)
	errs := chunk(nil, r, 0, ChunkError, AppendErrorChunk(nil, &ErrorChunk{Error: EIO, Message: "boom"}))
	errs = chunk(errs, r, ReplyFlagDone, ChunkErrorOffset, AppendErrorChunk(nil, &ErrorChunk{Error: ENOSPC, Offset: 10, HasOffset: true}))
	var simple [SimpleReplySize]byte
	(&SimpleReply{Error: EPERM, Cookie: r}).Put(&simple)
	return [][]byte{good, split, errs, simple[:], good[:40]}
}

func FuzzClientTransmission(f *testing.F) {
	for _, s := range clientTransmissionSeeds() {
		f.Add(s)
	}
	hs := clientHandshakeBytes(clientDefaultScript())
	f.Fuzz(func(t *testing.T, script []byte) {
		// Over a pipe, and over a unix socket, where the client reads
		// with raw system calls and spins for its replies at depth one.
		cs, ss := net.Pipe()
		clientFuzzTransmission(t, cs, ss, append(bytes.Clone(hs), script...))
		ucs, uss := serverTestUnixPair(t)
		clientFuzzTransmission(t, ucs, uss, append(bytes.Clone(hs), script...))
	})
}

// clientFuzzTransmission plays script (a handshake, then replies) from ss
// at a client on cs that makes a read and a block status request.
func clientFuzzTransmission(t *testing.T, cs, ss net.Conn, script []byte) {
	clientFuzzPlay(t, cs, ss, script, "client", func(ctx context.Context) {
		c, err := NewClient(ctx, cs, WithMaxInFlight(4))
		if err != nil {
			t.Errorf("valid handshake failed: %v", err)
			return
		}
		defer c.Close()
		buf := bytes.Repeat([]byte{0xcc}, 512)
		if err := c.Pread(ctx, buf, 0, 0); err != nil && !bytes.Equal(buf, make([]byte, 512)) {
			t.Errorf("failed read (%v) left data in the buffer", err)
		}
		ext, err := c.BlockStatus(ctx, 0, 4096, nil)
		if err == nil {
			var sum int64
			for _, e := range ext {
				if e.Length == 0 {
					t.Error("zero-length extent returned")
				}
				sum += int64(e.Length)
			}
			if sum == 0 || sum > 4096 {
				t.Errorf("extents cover %d bytes of a 4096-byte request", sum)
			}
		}
	})
}

// clientFuzzPlay runs client (given a context of 2 s) on cs while ss
// plays script, fails if it does not return within 5 s (what hangs), and
// closes both ends.
func clientFuzzPlay(t *testing.T, cs, ss net.Conn, script []byte, what string, client func(ctx context.Context)) {
	wg := clientFuzzPeer(ss, script)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		client(ctx)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal(what + " hangs")
	}
	cs.Close()
	wg.Wait()
	ss.Close()
}
