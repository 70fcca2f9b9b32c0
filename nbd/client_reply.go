package nbd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// The reader, run by the leader. A reply message is read in two steps: its
// header (with the fixed part of an OFFSET_DATA or OFFSET_HOLE chunk) is
// peeked whole and only then consumed, so a cut read leaves nothing of it
// consumed; what follows (data, an error or BLOCK_STATUS payload) is the
// message's body, whose progress is kept in clientConn.body, so that a cut
// read leaves it to be finished by whoever leads next.

// errClientInterrupted reports a read deadline hit (the read was cut).
var errClientInterrupted = errors.New("nbd: read interrupted")

// errClientLeave reports a leader that stops mid-message because its
// context ended; the message's body is left for the next leader.
var errClientLeave = errors.New("nbd: leader left mid-message")

// clientBody is what is left of a reply message whose header the reader
// has consumed.
type clientBody struct {
	active bool
	s      *clientSlot
	cookie uint64
	ch     ChunkHeader // the chunk's header (structured replies)
	simple bool
	inBuf  bool   // dst is part of s.buf: written only holding s.mu
	locked bool   // the reader holds s.mu
	direct bool   // dst is large: read it from the socket, not through br
	parse  bool   // dst is c.scratch[:ch.Length], to be parsed at the end
	dst    []byte // still to read
	skip   int    // then still to discard
	reqErr error  // the request's error found from the header
}

// clientSock is the io.Reader under the reply bufio.Reader. A read cut by
// a deadline returns errClientInterrupted; the reader decides what it
// means.
type clientSock struct{ c *clientConn }

func (r clientSock) Read(p []byte) (int, error) {
	c := r.c
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		c.ahead = c.ahead[n:]
		return n, nil
	}
	if c.headerOnly && len(p) > clientHeaderRead {
		// Do not read ahead into what is likely a large payload: it is
		// to go straight into its caller's buffer.
		p = p[:clientHeaderRead]
	}
	var n int
	var err error
	if c.raw != nil {
		timed, window := c.replyWait()
		c.raw.timed, c.raw.spin = timed, window
		n, err = c.raw.Read(p)
		if timed {
			c.spin.done(c.raw.spun, c.raw.waited)
		}
	} else {
		n, err = c.nc.Read(p)
	}
	return clientCut(n, err)
}

// clientCut turns a read cut by a deadline into errClientInterrupted
// (when it read nothing); the reader decides what the cut means.
func clientCut(n int, err error) (int, error) {
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if n > 0 {
			return n, nil
		}
		return 0, errClientInterrupted
	}
	return n, err
}

// readReply reads one reply message, or the rest of the one a leader
// left. It returns errClientInterrupted if cut before the message began,
// errClientLeave if cut mid-message because ctx ended, or an error that
// kills the connection.
func (c *clientConn) readReply(ctx context.Context) error {
	if !c.body.active {
		if err := c.readHeader(); err != nil {
			return err
		}
	}
	return c.readBody(ctx)
}

func (c *clientConn) readHeader() error {
	m, err := c.br.Peek(ReplyMagicSize)
	if err != nil {
		return err
	}
	switch binary.BigEndian.Uint32(m) {
	case MagicSimpleReply:
		return c.simpleHeader()
	case MagicStructuredReply:
		if !c.structured {
			return protoErr("structured reply chunk, but structured replies were not negotiated")
		}
		return c.chunkHeader()
	default:
		return badMagic("reply", uint64(binary.BigEndian.Uint32(m)))
	}
}

// consume drops n peeked bytes: the message has begun.
func (c *clientConn) consume(n int) {
	c.headerOnly = false
	_, _ = c.br.Discard(n)
}

// lookup finds the slot of an in-flight request by cookie and locks it.
func (c *clientConn) lookup(cookie uint64) (*clientSlot, error) {
	idx := cookie & 0xffffffff
	if idx < uint64(len(c.slots)) {
		s := &c.slots[idx]
		s.mu.Lock()
		if s.inflight && !s.complete && s.cookie == cookie {
			return s, nil
		}
		s.mu.Unlock()
	}
	return nil, protoErr(fmt.Sprintf("reply with unknown cookie %#x", cookie))
}

// begin starts the body of a message for s (locked by lookup).
func (c *clientConn) begin(s *clientSlot, cookie uint64) *clientBody {
	c.body = clientBody{active: true, s: s, cookie: cookie, locked: true}
	return &c.body
}

// dropBody forgets the message in progress (the connection is dying).
func (c *clientConn) dropBody() {
	if c.body.locked {
		c.body.s.mu.Unlock()
	}
	c.body = clientBody{}
}

// settle lets go of the slot's mutex unless the body writes into the
// caller's buffer.
func (c *clientConn) settle() {
	b := &c.body
	if !b.inBuf && b.locked {
		b.s.mu.Unlock()
		b.locked = false
	}
}

func (c *clientConn) simpleHeader() error {
	h, err := c.br.Peek(SimpleReplySize)
	if err != nil {
		return err
	}
	var r SimpleReply
	if err := r.Parse((*[SimpleReplySize]byte)(h)); err != nil {
		return err
	}
	c.consume(SimpleReplySize)
	s, err := c.lookup(r.Cookie)
	if err != nil {
		// proto.md: with an unknown cookie the client cannot know whether
		// data follows; it must disconnect.
		return err
	}
	b := c.begin(s, r.Cookie)
	b.simple = true
	switch {
	case r.Error != 0:
		b.reqErr = r.Error
	case s.cmd == CmdRead && c.structured:
		// proto.md: once structured replies are negotiated a READ MUST
		// get them; whether data follows cannot be known.
		return protoErr("simple reply with data to READ after structured replies were negotiated")
	case s.cmd == CmdRead:
		c.setData(s.buf, int(s.length))
	case s.cmd == CmdBlockStatus:
		b.reqErr = protoErr("simple success reply to BLOCK_STATUS")
	}
	c.settle()
	return nil
}

// setData makes the body n bytes of data for dst (nil: the caller gave
// up; discard them).
func (c *clientConn) setData(dst []byte, n int) {
	b := &c.body
	if dst == nil {
		b.skip = n
		return
	}
	b.dst, b.inBuf, b.direct = dst[:n], true, n >= clientDirectRead
}

// setScratch makes the body n bytes to read into c.scratch and parse.
func (c *clientConn) setScratch(n int) {
	if cap(c.scratch) < n {
		c.scratch = make([]byte, n)
	}
	c.body.dst, c.body.parse = c.scratch[:n], true
}

func (c *clientConn) chunkHeader() error {
	h, err := c.br.Peek(ChunkHeaderSize)
	if err != nil {
		return err
	}
	var ch ChunkHeader
	if err := ch.Parse((*[ChunkHeaderSize]byte)(h)); err != nil {
		return err
	}
	// The fixed part of a data or hole chunk is read with the header.
	fixed := 0
	switch {
	case ch.Type == ChunkOffsetData && ch.Length > OffsetDataHeaderSize:
		fixed = OffsetDataHeaderSize
	case ch.Type == ChunkOffsetHole && ch.Length == OffsetHoleSize:
		fixed = OffsetHoleSize
	}
	if fixed > 0 {
		if h, err = c.br.Peek(ChunkHeaderSize + fixed); err != nil {
			return err
		}
		copy(c.rfix[:], h[ChunkHeaderSize:])
	}
	c.consume(ChunkHeaderSize + fixed)
	s, err := c.lookup(ch.Cookie)
	if err != nil {
		return err
	}
	b := c.begin(s, ch.Cookie)
	b.ch = ch
	reqErr, err := c.chunkStart(s, &ch)
	if err != nil {
		return err // the leader drops the body and kills the connection
	}
	b.reqErr = reqErr
	c.settle()
	return nil
}

// chunkStart checks chunk ch for slot s (locked) and sets up its body. It
// returns reqErr to fail only the request, or err to kill the connection
// (the stream cannot be trusted or the length is past anything the request
// allows).
func (c *clientConn) chunkStart(s *clientSlot, ch *ChunkHeader) (reqErr, err error) {
	n := ch.Length
	switch {
	case ch.Type.IsError():
		limit := uint32(clientMaxErrorChunk)
		if ch.Type != ChunkError && ch.Type != ChunkErrorOffset {
			limit = clientMaxUnknownErrorChunk
		}
		if n > limit {
			return nil, protoErr(fmt.Sprintf("%v chunk of %d bytes, limit %d", ch.Type, n, limit))
		}
		c.setScratch(int(n))
		return nil, nil
	case ch.Type == ChunkNone:
		if n != 0 {
			return nil, protoErr(fmt.Sprintf("NONE chunk of %d bytes", n))
		}
		if !ch.Flags.Has(ReplyFlagDone) {
			return protoErr("NONE chunk without DONE"), nil
		}
		return nil, nil
	case ch.Type == ChunkOffsetData:
		return c.dataStart(s, n)
	case ch.Type == ChunkOffsetHole:
		return c.holeChunk(s, n)
	case ch.Type == ChunkBlockStatus:
		if s.cmd != CmdBlockStatus {
			return nil, protoErr("BLOCK_STATUS chunk in reply to " + s.cmd.String())
		}
		if n > clientMaxStatusChunk {
			return nil, protoErr(fmt.Sprintf("BLOCK_STATUS chunk of %d bytes, limit %d", n, clientMaxStatusChunk))
		}
		c.setScratch(int(n))
		return nil, nil
	}
	// proto.md: a client that gets a non-error chunk type it does not
	// know cannot tell what it means; the connection is done.
	return nil, protoErr("unknown chunk type " + ch.Type.String())
}

// dataStart checks an OFFSET_DATA chunk of n bytes (its offset is in
// c.rfix) and sets up its data as the body.
func (c *clientConn) dataStart(s *clientSlot, n uint32) (reqErr, err error) {
	if s.cmd != CmdRead {
		return nil, protoErr("OFFSET_DATA chunk in reply to " + s.cmd.String())
	}
	if n <= OffsetDataHeaderSize || uint64(n) > uint64(s.length)+OffsetDataHeaderSize {
		return nil, protoErr(fmt.Sprintf("OFFSET_DATA chunk of %d bytes to a READ of %d", n, s.length))
	}
	off := binary.BigEndian.Uint64(c.rfix[:OffsetDataHeaderSize])
	dlen := int(n - OffsetDataHeaderSize)
	if rerr := s.cover(off, uint64(dlen)); rerr != nil {
		c.body.skip = dlen
		return rerr, nil
	}
	var dst []byte
	if s.buf != nil {
		dst = s.buf[off-s.off:]
	}
	c.setData(dst, dlen)
	return nil, nil
}

// holeChunk handles an OFFSET_HOLE chunk of n bytes, read whole with its
// header into c.rfix.
func (c *clientConn) holeChunk(s *clientSlot, n uint32) (reqErr, err error) {
	if s.cmd != CmdRead {
		return nil, protoErr("OFFSET_HOLE chunk in reply to " + s.cmd.String())
	}
	if n != OffsetHoleSize {
		return nil, protoErr(fmt.Sprintf("OFFSET_HOLE chunk of %d bytes, want 12", n))
	}
	off, size := ParseOffsetHole(&c.rfix)
	if size == 0 {
		return protoErr("OFFSET_HOLE of size 0"), nil
	}
	if rerr := s.cover(off, uint64(size)); rerr != nil {
		return rerr, nil
	}
	if s.buf != nil {
		clear(s.buf[off-s.off:][:size])
	}
	return nil, nil
}

// readBody reads what is left of the body, then finishes the message.
func (c *clientConn) readBody(ctx context.Context) error {
	b := &c.body
	for len(b.dst) > 0 || b.skip > 0 {
		c.claimBuf()
		var n int
		var err error
		if len(b.dst) > 0 {
			n, err = c.readSome(b.dst, b.direct)
			b.dst = b.dst[n:]
		} else {
			n, err = c.br.Discard(b.skip)
			b.skip -= n
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, errClientInterrupted) {
			return err
		}
		c.unkick()
		if ctx.Err() != nil {
			// The leader's caller gave up: leave the rest to the next
			// leader.
			if b.locked {
				b.s.mu.Unlock()
				b.locked = false
			}
			return errClientLeave
		}
		// Otherwise a caller asked for its buffer back (claim sees it),
		// or the deadline was stale.
	}
	if b.direct {
		c.headerOnly = true
	}
	return c.finish()
}

// claimBuf makes sure the reader may go on writing into the caller's buffer:
// it holds s.mu and the caller has not given up. Otherwise what is left of
// the data is discarded instead.
func (c *clientConn) claimBuf() {
	b := &c.body
	if !b.inBuf {
		return
	}
	if !b.locked {
		b.s.mu.Lock()
		b.locked = true
	}
	if b.s.buf == nil || b.s.cancel.Load() {
		b.skip += len(b.dst)
		b.dst, b.inBuf = nil, false
		b.s.mu.Unlock()
		b.locked = false
	}
}

// readSome reads part of dst: from what br holds, then, for a direct body,
// straight from the socket, with what follows it up to the next header
// read ahead (client_raw.go).
func (c *clientConn) readSome(dst []byte, direct bool) (int, error) {
	if !direct || c.br.Buffered() > 0 {
		return c.br.Read(dst)
	}
	if c.raw == nil || len(c.ahead) > 0 {
		return clientSock{c}.Read(dst)
	}
	n, ahead, err := c.raw.ReadAhead(dst)
	c.ahead = ahead
	return clientCut(n, err)
}

// finish completes the message: the slot's request is done if this was a
// simple reply or a chunk with DONE.
func (c *clientConn) finish() error {
	b := &c.body
	s := b.s
	if !b.locked {
		s.mu.Lock()
	}
	defer func() {
		s.mu.Unlock()
		c.body = clientBody{}
	}()
	if !s.inflight || s.complete || s.cookie != b.cookie {
		return nil // the connection failed meanwhile
	}
	if b.simple {
		c.noteReplyError(b.reqErr)
		c.completeLocked(s, b.reqErr)
		return nil
	}
	reqErr := b.reqErr
	if b.parse {
		reqErr = c.parseChunk(s, &b.ch, c.scratch[:b.ch.Length])
	}
	if reqErr != nil && s.err == nil {
		// The first error of a reply wins; read on to DONE.
		s.err = reqErr
	}
	if b.ch.Flags.Has(ReplyFlagDone) {
		if s.err == nil && s.cmd == CmdRead && s.covered != uint64(s.length) {
			s.err = protoErr(fmt.Sprintf("READ reply done after %d of %d bytes", s.covered, s.length))
		}
		if s.err == nil && s.cmd == CmdBlockStatus && len(s.extRuns) == 0 {
			s.err = protoErr("BLOCK_STATUS reply done without any extents")
		}
		c.noteReplyError(s.err)
		c.completeLocked(s, s.err)
	}
	return nil
}

// parseChunk parses the payload p of an error or BLOCK_STATUS chunk for s
// and returns the request's error.
func (c *clientConn) parseChunk(s *clientSlot, ch *ChunkHeader, p []byte) error {
	if ch.Type == ChunkBlockStatus {
		return s.addExtents(c.contexts, p)
	}
	if ch.Type != ChunkError && ch.Type != ChunkErrorOffset {
		// proto.md: an unknown error type is still an error; use its
		// value if it has one.
		if len(p) >= 6 && binary.BigEndian.Uint32(p) != 0 {
			return Errno(binary.BigEndian.Uint32(p))
		}
		return protoErr("unknown error chunk " + ch.Type.String())
	}
	e, perr := ParseErrorChunk(ch.Type, p)
	if perr != nil {
		return perr
	}
	if e.HasOffset && (e.Offset < s.off || e.Offset-s.off >= uint64(s.length)) {
		return protoErr(fmt.Sprintf("ERROR_OFFSET %d outside the request [%d, +%d)", e.Offset, s.off, s.length))
	}
	return &ServerError{Errno: e.Error, Message: e.Message, Offset: e.Offset, HasOffset: e.HasOffset}
}
