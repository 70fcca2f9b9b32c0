package nbd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"
)

// The writing side of transmission: replies queued by whoever finished a
// request and written, batch by batch, by whoever holds the pen.

// serverMaxMessage bounds the message of an error chunk.
const serverMaxMessage = 128

// takePen makes the caller the reply writer if no one is writing: sends
// queue their replies until releasePen.
func (c *serverConn) takePen(ts *serverTransmitState) bool {
	ts.wmu.Lock()
	defer ts.wmu.Unlock()
	if ts.writing {
		return false
	}
	ts.writing = true
	return true
}

// releasePen writes every queued reply and puts the pen down.
func (c *serverConn) releasePen(ts *serverTransmitState) {
	ts.wmu.Lock()
	c.writeQueued(ts)
}

// send queues the reply of slot s (s.reply); the slot is returned to the
// free list once it is written. After the first write failure the
// connection is closed (which stops the reader) and later replies are
// dropped.
func (c *serverConn) send(ts *serverTransmitState, s *serverSlot) {
	ts.wmu.Lock()
	ts.queue = append(ts.queue, s)
	if ts.writing {
		ts.wmu.Unlock()
		return
	}
	ts.writing = true
	c.writeQueued(ts)
}

// writeQueued writes the queue, batch by batch, until it is empty, and
// puts the pen down. It is called with wmu held and the pen taken, and
// returns with wmu released.
func (c *serverConn) writeQueued(ts *serverTransmitState) {
	for len(ts.queue) > 0 {
		batch := ts.queue
		ts.queue, ts.spare = ts.spare[:0], batch
		failed := ts.werr != nil
		ts.wmu.Unlock()
		var err error
		if !failed {
			err = c.writeReplies(ts, batch)
		}
		for _, q := range batch {
			c.sent(ts, q)
			ts.free <- q
		}
		ts.wmu.Lock()
		if err != nil && ts.werr == nil {
			ts.werr = err
			c.netc.Close()
		}
	}
	ts.writing = false
	ts.wmu.Unlock()
}

// sent forgets the reply of q, written or dropped: its buffers go back to
// their pool and what the backend lent it goes back to the backend.
func (c *serverConn) sent(ts *serverTransmitState, q *serverSlot) {
	q.reply.Release()
	q.tail.Release() // empty, unless a structured read's runs missed bytes
	c.dropPayload(q) // of a write that was not served
	c.endRequest(q)
	c.unreserve(ts, q)
	if q.lent[1] > 0 {
		clear(q.pieces) // keep no piece alive
		q.pieces = q.pieces[:0]
		clear(q.views)
		q.views = q.views[:0]
		c.export.lender.GiveBack(q.lent[0], q.lent[1])
		q.lent[1] = 0
	}
}

// serverReplyWindow is the most of a batch of replies written under one
// deadline of Server.ReplyTimeout: a client that takes that much per
// ReplyTimeout keeps its session however large its replies.
const serverReplyWindow = serverLargeBuf

// writeReplies writes whole replies in one batch: one Write or writev,
// or, past serverReplyWindow bytes with a ReplyTimeout, one a window.
func (c *serverConn) writeReplies(ts *serverTransmitState, batch []*serverSlot) error {
	n := 0
	for _, q := range batch {
		n += q.reply.Len()
	}
	if ts.timeout == 0 || n <= serverReplyWindow {
		for _, q := range batch {
			ts.batch.Add(&q.reply)
		}
		return c.writeBatch(ts)
	}
	return c.writeWindows(ts, batch)
}

// writeWindows writes the replies of batch serverReplyWindow bytes at a
// time, each window under a deadline of its own.
func (c *serverConn) writeWindows(ts *serverTransmitState, batch []*serverSlot) error {
	all := ts.views[:0]
	for _, q := range batch {
		all = q.reply.Buffers(all)
	}
	ts.views = all[:0]
	defer clear(all) // keep no buffer alive
	for views := all; len(views) > 0; {
		views = ts.batch.AddPrefix(views, serverReplyWindow)
		if err := c.writeBatch(ts); err != nil {
			return err
		}
	}
	return nil
}

// writeBatch writes what ts.batch holds, within ReplyTimeout if set: a
// write that times out fails with ErrReplyTimeout (the connection is
// then unusable, and closed by writeQueued). The deadline is renewed only
// once less than ReplyTimeout of it is left, to a quarter more than
// ReplyTimeout away: setting it costs several times reading the clock
// (about 200 ns against 30), and a batch gets between ReplyTimeout and a
// quarter more.
func (c *serverConn) writeBatch(ts *serverTransmitState) error {
	if ts.timeout > 0 {
		if now := time.Now(); ts.deadline.Sub(now) < ts.timeout {
			ts.deadline = now.Add(ts.timeout + ts.timeout/4)
			c.netc.SetWriteDeadline(ts.deadline)
		}
	}
	_, err := ts.batch.Write()
	if err != nil && ts.timeout > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%w: replies not taken within %v", ErrReplyTimeout, ts.timeout)
	}
	return err
}

// pushHeader puts an n-byte header in front of s.reply and returns it
// for the caller to fill: in the headroom of the reply's first buffer, or
// in s.small when the reply is empty.
func (c *serverConn) pushHeader(s *serverSlot, n int) []byte {
	if s.reply.Len() == 0 {
		h := s.small[:n]
		s.reply.AppendBytes(h)
		return h
	}
	h, err := s.reply.Push(n)
	if err != nil {
		panic(err) // the server's buffers have serverHeadroom of headroom
	}
	return h
}

func (c *serverConn) sendOK(ts *serverTransmitState, s *serverSlot) {
	h := c.pushHeader(s, SimpleReplySize)
	r := SimpleReply{Cookie: s.req.Cookie}
	r.Put((*[SimpleReplySize]byte)(h))
	c.send(ts, s)
}

// sendError answers with e: a structured ERROR chunk with a message once
// structured replies are negotiated (required for READ, preferred for the
// rest), a simple reply otherwise.
func (c *serverConn) sendError(ts *serverTransmitState, s *serverSlot, e Errno, msg string) {
	s.reply.Release() // what was built of a reply that failed
	if !c.structured {
		h := c.pushHeader(s, SimpleReplySize)
		r := SimpleReply{Error: e, Cookie: s.req.Cookie}
		r.Put((*[SimpleReplySize]byte)(h))
		c.send(ts, s)
		return
	}
	if msg == "" {
		msg = e.Syscall().Error()
	}
	if len(msg) > serverMaxMessage {
		msg = msg[:serverMaxMessage]
	}
	n := ChunkHeaderSize + 6 + len(msg)
	b := s.small[:n]
	h := ChunkHeader{Flags: ReplyFlagDone, Type: ChunkError, Cookie: s.req.Cookie, Length: uint32(6 + len(msg))}
	h.Put((*[ChunkHeaderSize]byte)(b))
	binary.BigEndian.PutUint32(b[ChunkHeaderSize:], uint32(e))
	binary.BigEndian.PutUint16(b[ChunkHeaderSize+4:], uint16(len(msg)))
	copy(b[ChunkHeaderSize+6:], msg)
	s.reply.AppendBytes(b)
	c.send(ts, s)
}

func (c *serverConn) finish(ts *serverTransmitState, s *serverSlot, err error) {
	if err != nil {
		c.sendError(ts, s, ErrnoOf(err), "")
		return
	}
	c.sendOK(ts, s)
}
