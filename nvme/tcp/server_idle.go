package tcp

import (
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// Letting an idle queue's buffers go. A slot's data buffer grows to the
// largest transfer it has seen and its pages to its largest write of
// pages, and both are kept so that a busy queue allocates nothing per
// command; a queue that has taken no command for slotBufferIdle lets
// those of its free slots go, as nbd's server lets its free buffers go
// (serverBufferIdle). The check is a timer of the connection, armed when
// a slot that keeps memory is freed while none is armed, and re-armed by
// itself while commands keep coming: a command costs a counter and a
// flag read under freeMu, which it takes anyway, not a timer. The trim
// touches only slots on the free stack, under freeMu: the reader takes a
// slot (popSlot) under the same lock, so it never meets a slot being
// trimmed, and whoever frees a slot is done with its buffers.

// slotBufferIdle is how long a queue goes without a command before its
// free slots let their buffers and pages go.
const slotBufferIdle = time.Second

func (s *Server) bufferIdle() time.Duration {
	if s.testBufferIdle > 0 {
		return s.testBufferIdle
	}
	return slotBufferIdle
}

// keeps reports whether the slot holds memory that trim would let go.
func (sl *slot) keeps() bool {
	return cap(sl.buf) > 0 || cap(sl.pages) > 0 || cap(sl.pieces) > 0
}

// letGo drops the slot's data buffer, its pages and its list of lent
// pieces (empty in a free slot) for the garbage collector; the next
// command that needs them makes them anew.
func (sl *slot) letGo() {
	sl.buf, sl.pages, sl.pieces = nil, nil, nil
}

// startTrim lets the queue's free slots be trimmed once it is idle: the
// slots are the connected queue's for good.
func (c *conn) startTrim() {
	c.freeMu.Lock()
	c.trimOn = true
	c.freeMu.Unlock()
}

// stopTrim ends the trimming: the connection is ending. A check that is
// due finds trimOn false and does nothing.
func (c *conn) stopTrim() {
	c.freeMu.Lock()
	c.trimOn = false
	if c.trimTimer != nil {
		c.trimTimer.Stop()
	}
	c.freeMu.Unlock()
}

// armTrim starts the idle check if none is armed, for slot i that was
// just freed. Call with freeMu held.
func (c *conn) armTrim(i uint16) {
	if c.trimArmed || !c.trimOn || !c.slots[i].keeps() {
		return
	}
	c.trimArmed, c.trimSeen = true, c.taken
	if c.trimTimer == nil {
		c.trimTimer = time.AfterFunc(c.s.bufferIdle(), c.trimIdle)
	} else {
		c.trimTimer.Reset(c.s.bufferIdle())
	}
}

// trimIdle, the idle check, lets the free slots' memory go if the queue
// has taken no command since the last check, and checks again later if
// it has. Once it has trimmed it stays disarmed until a slot that keeps
// memory is freed again (a command that was running, or a new one).
func (c *conn) trimIdle() {
	c.freeMu.Lock()
	defer c.freeMu.Unlock()
	if !c.trimOn || !c.trimArmed {
		return
	}
	if c.taken != c.trimSeen {
		c.trimSeen = c.taken
		c.trimTimer.Reset(c.s.bufferIdle())
		return
	}
	for _, i := range c.freeStack {
		c.slots[i].letGo()
	}
	c.trimArmed = false
}

// freeBytes returns the bytes of the data buffers and pages the queue's
// free slots keep (for tests: a queue's busy slots are not counted).
func (c *conn) freeBytes() int64 {
	c.freeMu.Lock()
	defer c.freeMu.Unlock()
	var n int64
	for _, i := range c.freeStack {
		sl := &c.slots[i]
		n += int64(cap(sl.buf))
		for _, p := range sl.pages[:cap(sl.pages)] {
			if p != nil {
				n += nbd.PageSize
			}
		}
	}
	return n
}

// freeBytes returns the bytes the free slots of every connection keep
// (conn.freeBytes).
func (s *Server) freeBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, c := range s.conns {
		n += c.freeBytes()
	}
	return n
}
