package nbd

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// A scripted NBD server for client unit tests: the test drives the server
// side of a net.Pipe byte by byte.

type clientPeer struct {
	t    testing.TB
	conn net.Conn
}

func (p *clientPeer) read(n int) []byte {
	p.t.Helper()
	b := make([]byte, n)
	_ = p.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(p.conn, b); err != nil {
		p.t.Errorf("scripted server: read %d bytes: %v", n, err)
		panic(clientPeerDone{})
	}
	return b
}

func (p *clientPeer) write(b ...[]byte) {
	for _, x := range b {
		if len(x) == 0 {
			continue // a zero-length write on a net.Pipe waits for a Read
		}
		_ = p.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := p.conn.Write(x); err != nil {
			panic(clientPeerDone{})
		}
	}
}

// hangup waits until the client closes the connection.
func (p *clientPeer) hangup() {
	_ = p.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, p.conn)
	if err != nil && !errors.Is(err, io.ErrClosedPipe) {
		p.t.Errorf("scripted server: waiting for the client to hang up: %v", err)
	}
}

// clientPeerDone unwinds a script whose client went away.
type clientPeerDone struct{}

func (p *clientPeer) u16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func (p *clientPeer) u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func (p *clientPeer) u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// greet sends a newstyle greeting with flags and reads the client flags.
func (p *clientPeer) greet(hf HandshakeFlags) ClientFlags {
	p.write(p.u64(MagicNBD), p.u64(MagicIHaveOpt), p.u16(uint16(hf)))
	return ClientFlags(binary.BigEndian.Uint32(p.read(4)))
}

// option reads one option and returns its code and data.
func (p *clientPeer) option() (OptionCode, []byte) {
	var h OptionHeader
	b := (*[OptionHeaderSize]byte)(p.read(OptionHeaderSize))
	if err := h.Parse(b); err != nil {
		p.t.Errorf("scripted server: %v", err)
		panic(clientPeerDone{})
	}
	return h.Option, p.read(int(h.Length))
}

func (p *clientPeer) reply(o OptionCode, t OptionReplyType, data []byte) {
	var b [OptionReplySize]byte
	r := OptionReply{Option: o, Type: t, Length: uint32(len(data))}
	r.Put(&b)
	p.write(b[:], data)
}

// expect reads one option and fails unless it is o.
func (p *clientPeer) expect(o OptionCode) []byte {
	p.t.Helper()
	got, data := p.option()
	if got != o {
		p.t.Errorf("scripted server: got option %v, want %v", got, o)
		panic(clientPeerDone{})
	}
	return data
}

// request reads one transmission request and its payload.
func (p *clientPeer) request() (Request, []byte) {
	var r Request
	if err := r.Parse((*[RequestSize]byte)(p.read(RequestSize))); err != nil {
		p.t.Errorf("scripted server: %v", err)
		panic(clientPeerDone{})
	}
	var data []byte
	if r.Type == CmdWrite {
		data = p.read(int(r.Length))
	}
	return r, data
}

func (p *clientPeer) simple(cookie uint64, errno Errno, data []byte) {
	var b [SimpleReplySize]byte
	r := SimpleReply{Error: errno, Cookie: cookie}
	r.Put(&b)
	p.write(b[:], data)
}

func (p *clientPeer) chunk(cookie uint64, flags ReplyFlags, t ChunkType, payload ...[]byte) {
	n := 0
	for _, x := range payload {
		n += len(x)
	}
	var b [ChunkHeaderSize]byte
	h := ChunkHeader{Flags: flags, Type: t, Cookie: cookie, Length: uint32(n)}
	h.Put(&b)
	p.write(append([][]byte{b[:]}, payload...)...)
}

// clientScriptCfg describes the standard handshake of the scripted server.
type clientScriptCfg struct {
	size       uint64
	flags      ExportFlags
	structured bool
	contexts   []MetaContext // agreed on SET_META_CONTEXT
	blockSize  [3]uint32     // sent as NBD_INFO_BLOCK_SIZE when non-zero
}

func clientDefaultScript() clientScriptCfg {
	return clientScriptCfg{
		size: 1 << 20,
		flags: ExportHasFlags | ExportSendFlush | ExportSendFUA | ExportSendTrim | ExportSendWriteZeroes |
			ExportSendDF | ExportSendCache | ExportSendFastZero | ExportCanMultiConn,
		structured: true,
		contexts:   []MetaContext{{ID: 7, Name: MetaContextBaseAllocation}},
	}
}

// handshake plays a fixed newstyle server through GO.
func (p *clientPeer) handshake(cfg clientScriptCfg) {
	p.greet(HandshakeFixedNewstyle | HandshakeNoZeroes)
	for {
		o, data := p.option()
		switch o {
		case OptStructuredReply:
			if cfg.structured {
				p.reply(o, RepAck, nil)
			} else {
				p.reply(o, RepErrUnsup, nil)
			}
		case OptSetMetaContext:
			for _, m := range cfg.contexts {
				p.reply(o, RepMetaContext, AppendMetaContextReply(nil, m.ID, m.Name))
			}
			p.reply(o, RepAck, nil)
		case OptGo:
			if _, err := ParseInfoRequest(data); err != nil {
				p.t.Errorf("malformed GO: %v", err)
			}
			p.reply(o, RepInfo, AppendInfoExport(nil, cfg.size, cfg.flags))
			if cfg.blockSize != [3]uint32{} {
				p.reply(o, RepInfo, AppendInfoBlockSize(nil, cfg.blockSize[0], cfg.blockSize[1], cfg.blockSize[2]))
			}
			p.reply(o, RepAck, nil)
			return
		default:
			p.reply(o, RepErrUnsup, nil)
		}
	}
}

// clientScripted runs script as the server of a net.Pipe and connects a
// Client to it with opts. The script's panics from a closed pipe end it
// quietly; the test waits for it at cleanup.
func clientScripted(t *testing.T, script func(p *clientPeer), opts ...Option) (*Client, error) {
	t.Helper()
	cs, ss := net.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(clientPeerDone); !ok {
					panic(r)
				}
			}
			ss.Close()
		}()
		script(&clientPeer{t: t, conn: ss})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := NewClient(ctx, cs, opts...)
	t.Cleanup(func() {
		if c != nil {
			c.Close()
		}
		cs.Close()
		ss.Close()
		wg.Wait()
	})
	return c, err
}

// clientWaitErr waits for an error on ch, failing the test on a hang.
func clientWaitErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("call hangs")
		return nil
	}
}

// clientAsync runs f in a goroutine and returns its result channel.
func clientAsync(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func clientIsProto(err error) bool { return errors.Is(err, ErrProtocol) }
