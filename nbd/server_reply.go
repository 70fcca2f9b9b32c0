package nbd

import (
	"encoding/binary"
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

// send queues the reply b of slot s; the slot is returned to the free
// list once b is written. After the first write failure the connection is
// closed (which stops the reader) and later replies are dropped.
func (c *serverConn) send(ts *serverTransmitState, s *serverSlot, b []byte) {
	s.out = b
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
			c.sent(q)
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

// sent forgets the reply of q, written or dropped, and gives back what
// the backend lent it.
func (c *serverConn) sent(q *serverSlot) {
	q.out = nil
	if len(q.iov) > 0 {
		clear(q.iov) // keep no chunk alive
		q.iov = q.iov[:0]
	}
	if q.lent[1] > 0 {
		clear(q.pieces)
		q.pieces = q.pieces[:0]
		clear(q.views)
		q.views = q.views[:0]
		c.export.lender.GiveBack(q.lent[0], q.lent[1])
		q.lent[1] = 0
	}
}

// writeReplies writes whole replies: one Write for one in one piece, one
// writev otherwise (net.Buffers on a socket; a Write each elsewhere, as
// on TLS).
func (c *serverConn) writeReplies(ts *serverTransmitState, batch []*serverSlot) error {
	if len(batch) == 1 && len(batch[0].iov) == 0 && ts.raw == nil {
		_, err := c.netc.Write(batch[0].out)
		return err
	}
	bufs := ts.bufs[:0]
	for _, q := range batch {
		if len(q.iov) > 0 {
			bufs = append(bufs, q.iov...)
		} else {
			bufs = append(bufs, q.out)
		}
	}
	ts.bufs = bufs
	if ts.raw != nil {
		err := ts.raw.writev(bufs)
		clear(bufs)
		return err
	}
	// WriteTo consumes the Buffers it is called on; a local one would
	// escape (the method has a pointer receiver) and cost an allocation
	// per batch, so the state keeps it.
	ts.nb = bufs
	_, err := ts.nb.WriteTo(c.netc)
	ts.nb = nil
	clear(bufs) // keep no lent chunk alive
	return err
}

func (c *serverConn) sendOK(ts *serverTransmitState, s *serverSlot) {
	b := (*[SimpleReplySize]byte)(s.small[:SimpleReplySize])
	r := SimpleReply{Cookie: s.req.Cookie}
	r.Put(b)
	c.send(ts, s, b[:])
}

// sendError answers with e: a structured ERROR chunk with a message once
// structured replies are negotiated (required for READ, preferred for the
// rest), a simple reply otherwise.
func (c *serverConn) sendError(ts *serverTransmitState, s *serverSlot, e Errno, msg string) {
	if !c.structured {
		b := (*[SimpleReplySize]byte)(s.small[:SimpleReplySize])
		r := SimpleReply{Error: e, Cookie: s.req.Cookie}
		r.Put(b)
		c.send(ts, s, b[:])
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
	c.send(ts, s, b)
}

func (c *serverConn) finish(ts *serverTransmitState, s *serverSlot, err error) {
	if err != nil {
		c.sendError(ts, s, ErrnoOf(err), "")
		return
	}
	c.sendOK(ts, s)
}
